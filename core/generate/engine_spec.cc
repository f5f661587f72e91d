// Speculative decoding's parts of the engine's round (engine.h, core/generate/speculation.h): a request's
// method and draft length at submit, its drafter at intake, this round's drafts before schedule(), and after
// verification (update()) the KV of rejected rows truncated and the spec_decode counters.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/common/field_error.h"
#include "core/generate/engine_internal.h"

namespace frost {

absl::Status Engine::resolve_spec(const GenerationRequest& req, Pending* p) const {
  const SpeculativeOptions& o = cfg_.speculative;
  if (req.spec_num_tokens < 0)
    return invalid_field("speculative.num_tokens",
                         absl::StrCat("must be >= 0 (0 = the server's), got ", req.spec_num_tokens));
  p->spec_method = req.spec_method == SpecMethod::kServer ? o.method : req.spec_method;
  // A request may draft fewer tokens than the server allows, never more (engine.speculative.num_tokens bounds
  // the rows one sequence adds to a step).
  p->spec_k = req.spec_num_tokens > 0 ? std::min(req.spec_num_tokens, o.num_tokens) : o.num_tokens;
  // Jump-forward is the server's (engine.speculative.jump_forward) for every request that does not turn
  // speculation off itself.
  p->jump_forward = o.jump_forward && o.jump_forward_tokens > 0 && req.spec_method != SpecMethod::kOff;
  return absl::OkStatus();
}

void Engine::start_spec(EngineRequest& a) const {
  const Pending& p = *a.req;
  const bool drafter = p.spec_method == SpecMethod::kNgram || p.spec_method == SpecMethod::kSuffix;
  const bool jump = p.jump_forward && p.constraint != nullptr;
  if (!drafter && !jump) return;
  a.spec = std::make_unique<Speculation>(drafter ? p.spec_method : SpecMethod::kOff, p.spec_k,
                                         static_cast<int32_t>(model_->config.n_vocab), suffix_cache_.get());
}

// Before schedule(): every decoding sequence that speculates gets this round's draft in its scheduler entry
// (SchedEntry::spec_rows: its last token, then the draft), as long as speculation.h's cost rule allows at
// this round's θ. Drafters run only while at most engine.speculative.max_batch sequences decode; jump-forward
// at any batch size the rule allows. A drafter that does not draft this round is not synced either: it
// catches up on the new tokens when it next drafts. A draft never reaches past max_new_tokens.
void Engine::draft(Loop& loop) {
  const int64_t t0 = RealClock::get().now_ns();
  loop.t_round_ns = t0;
  loop.decode_only = false;
  draft_round(loop);
  const int64_t t1 = RealClock::get().now_ns();
  loop.t_draft_ns = t1 - t0;
  if (t1 - t0 > 2000) {  // a round with no speculating sequence costs ~nothing: skip the lock
    absl::MutexLock lock(&mu_);
    counters_.t_draft_s += static_cast<double>(t1 - t0) * 1e-9;
  }
}

void Engine::draft_round(Loop& loop) {
  const SpeculativeOptions& o = cfg_.speculative;
  auto decoding = [](const SchedEntry* e) {
    return static_cast<int64_t>(e->tokens->size()) - e->kv->n_tokens() == 1;
  };
  int32_t n_decoding = 0;
  for (const SchedEntry* e : loop.sched.running()) n_decoding += decoding(e) ? 1 : 0;
  const bool drafting = n_decoding <= o.max_batch;
  // Until the step cost is fitted (the first steps), θ = 0.3: drafts of one or two tokens, which make the
  // rows vary so that it can be.
  const double theta = o.adaptive ? loop.cost.threshold(n_decoding, n_decoding, 0.3) : 0.0;  // 0: always k
  for (SchedEntry* e : loop.sched.running()) {
    e->spec_rows.clear();
    EngineRequest& a = *e->owner;
    if (!a.spec || a.done || !decoding(e)) continue;
    // Tokens after the one this step samples anyway: a draft longer than that is never used.
    const int64_t room = a.req->params.max_new_tokens - a.seq->n_generated() - 1;
    const int32_t n = room > 0 ? static_cast<int32_t>(std::min<int64_t>(a.spec->length(theta), room)) : 0;
    if (n == 0) continue;  // the drafter is not even synced: it catches up on the tokens when it next drafts
    std::vector<int32_t>& d = loop.proposal;
    d.clear();
    if (drafting) a.spec->propose(*e->tokens, n, &d);  // past max_batch only jump-forward: no drafter sync
    a.seq->shape_draft(&d, &a.forced, a.req->jump_forward ? std::min(n, o.jump_forward_tokens) : 0);
    if (static_cast<int32_t>(d.size()) > n) {
      d.resize(static_cast<size_t>(n));
      a.forced.resize(d.size());
    }
    if (d.empty()) continue;
    e->spec_rows.push_back(e->tokens->back());
    e->spec_rows.insert(e->spec_rows.end(), d.begin(), d.end());
  }
}

// After verification, before commit(): each verified draft's rejected rows leave the KV (books and storage:
// SequenceKv::truncate gives back blocks past the kept positions; the rows left in a kept block are
// overwritten by the next step), so commit() publishes only verified positions. Then the counters.
void Engine::rewind_rejected(Loop& loop) {
  uint64_t drafts = 0, drafted = 0, accepted = 0, forced = 0;
  std::vector<uint64_t> per_pos;
  for (size_t i = 0; i < loop.to_sample.size(); ++i) {
    const int32_t d = loop.drafted[i];
    if (d == 0) continue;
    EngineRequest& a = *loop.to_sample[i];
    const int32_t acc = loop.verdicts[i].accepted;
    a.entry.kv->truncate(a.entry.kv->n_tokens() - (d - acc));
    for (int32_t j = 0; j < d; ++j) forced += a.forced[static_cast<size_t>(j)] != 0 ? 1 : 0;
    a.spec->record(d, acc);
    a.n_draft_tokens += d;
    a.n_accepted_tokens += acc;
    ++drafts;
    drafted += static_cast<uint64_t>(d);
    accepted += static_cast<uint64_t>(acc);
    if (per_pos.size() < static_cast<size_t>(acc)) per_pos.resize(static_cast<size_t>(acc), 0);
    for (int32_t j = 0; j < acc; ++j) ++per_pos[static_cast<size_t>(j)];
  }
  if (drafts == 0) return;
  absl::MutexLock lock(&mu_);
  EngineStats& s = counters_;
  s.spec_drafts += drafts;
  s.spec_draft_tokens += drafted;
  s.spec_accepted_tokens += accepted;
  s.spec_forced_tokens += forced;
  if (s.spec_accepted_per_pos.size() < per_pos.size()) s.spec_accepted_per_pos.resize(per_pos.size(), 0);
  for (size_t j = 0; j < per_pos.size(); ++j) s.spec_accepted_per_pos[j] += per_pos[j];
}

}  // namespace frost
