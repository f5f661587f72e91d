#include "core/generate/scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace frost {

void Scheduler::remove(SchedEntry* e) {
  running_.erase(std::remove(running_.begin(), running_.end(), e), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), e), waiting_.end());
  if (e->kv) e->kv->reset();
  e->running = false;
}

void Scheduler::add_to_step(SchedEntry* e, int64_t n, Step& step) {
  const SequenceKv& kv = *e->kv;
  const auto total = static_cast<int64_t>(e->tokens->size());
  StepSeq q;
  q.kv = e->kv.get();
  q.tokens = e->tokens->data() + kv.n_tokens();
  q.n_tokens = n;
  q.logits = kv.n_tokens() + n == total;  // the chunk reaches the last token: its logits give the next one
  step.seqs.push_back(q);
  step.who.push_back(e);
  step.n_tokens += n;
}

void Scheduler::preempt(SchedEntry* e, Step& step) {
  // Unschedule it if it already has rows in this step (a decode scheduled before a prefill needed its blocks).
  for (size_t j = 0; j < step.who.size(); ++j) {
    if (step.who[j] != e) continue;
    step.n_tokens -= step.seqs[j].n_tokens;
    step.who.erase(step.who.begin() + static_cast<std::ptrdiff_t>(j));
    step.seqs.erase(step.seqs.begin() + static_cast<std::ptrdiff_t>(j));
    break;
  }
  running_.erase(std::remove(running_.begin(), running_.end(), e), running_.end());
  e->kv->reset();  // blocks back to the pool; published ones stay findable in the prefix cache
  e->running = false;
  ++e->n_preempted;
  ++preemptions_;
  waiting_.push_front(e);
  step.preempted.push_back(e);
}

bool Scheduler::admit(SchedEntry* e, int64_t budget, Step& step) {
  if (!e->kv) e->kv = e->make_kv();
  SequenceKv& kv = *e->kv;
  const auto total = static_cast<int64_t>(e->tokens->size());
  int64_t adopted = 0;
  // The longest cached prefix of whole blocks, leaving at least the last token to compute.
  if (cfg_.prefix_caching) adopted = kv.adopt_prefix(e->tokens->data(), total - 1);
  const int64_t n = std::min(total - kv.n_tokens(), budget);
  const int64_t new_blocks = kv.blocks_for(kv.n_tokens() + n) - static_cast<int64_t>(kv.block_table().size());
  const bool keeps_watermark = pool_->n_available() - new_blocks >= cfg_.watermark_blocks;
  if ((!running_.empty() && !keeps_watermark) || !kv.reserve(kv.n_tokens() + n)) {
    kv.reset();  // not now: give back what it adopted or took
    return false;
  }
  prefix_queries_ += static_cast<uint64_t>(total);
  prefix_hits_ += static_cast<uint64_t>(adopted);
  e->running = true;
  running_.push_back(e);
  add_to_step(e, n, step);
  return true;
}

namespace {

int64_t logit_rows_of(const Scheduler::Step& step) {
  int64_t n = 0;
  for (const StepSeq& q : step.seqs) n += q.n_logit_rows();
  return n;
}

}  // namespace

// 1b: the decode rows scheduled so far get their sequences' draft rows (scheduler.h). Returns the budget left.
int64_t Scheduler::add_drafts(int64_t budget, Step& step) {
  int64_t logit_rows = logit_rows_of(step);
  for (size_t j = 0; j < step.seqs.size(); ++j) {
    SchedEntry* e = step.who[j];
    StepSeq& q = step.seqs[j];
    if (e->spec_rows.size() < 2 || q.n_tokens != 1 || !q.logits) continue;
    const int64_t d = std::min({static_cast<int64_t>(e->spec_rows.size()) - 1, budget, cfg_.max_logit_rows - logit_rows});
    if (d <= 0) continue;
    if (!e->kv->reserve(e->kv->n_tokens() + 1 + d)) continue;  // never preempts: blocks it took stay for later
    q.tokens = e->spec_rows.data();
    q.n_tokens = 1 + d;
    q.draft = static_cast<int32_t>(d);
    step.n_tokens += d;
    budget -= d;
    logit_rows += d;
  }
  return budget;
}

Scheduler::Step Scheduler::schedule() {
  Step step;
  int64_t budget = cfg_.max_batch_tokens;
  // 1. running sequences: decode rows first (pass 0), then prompt chunks (pass 1), oldest first
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) budget = add_drafts(budget, step);
    for (size_t i = 0; i < running_.size();) {
      SchedEntry* e = running_[i];
      const int64_t need = static_cast<int64_t>(e->tokens->size()) - e->kv->n_tokens();
      const bool decode = need == 1;
      const bool done = std::find(step.who.begin(), step.who.end(), e) != step.who.end();
      if (done || decode != (pass == 0) || need <= 0 || budget <= 0) {
        ++i;
        continue;
      }
      const int64_t n = std::min(need, budget);
      bool self_preempted = false;
      while (!e->kv->reserve(e->kv->n_tokens() + n)) {
        SchedEntry* victim = running_.back();  // the newest
        if (victim == e) {
          self_preempted = true;
          break;
        }
        // A victim with rows already in this step gives their budget back.
        for (size_t j = 0; j < step.who.size(); ++j)
          if (step.who[j] == victim) budget += step.seqs[j].n_tokens;
        preempt(victim, step);
      }
      if (self_preempted) {
        preempt(e, step);  // it was the last element: index i now points past the end
        continue;
      }
      add_to_step(e, n, step);
      budget -= n;
      ++i;
    }
  }
  // 2. waiting sequences, in order, while slots, budget and blocks allow (preempted ones sit at the front)
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < cfg_.max_running && budget > 0) {
    SchedEntry* e = waiting_.front();
    const size_t before = step.seqs.size();
    if (!admit(e, budget, step)) break;
    waiting_.pop_front();
    budget -= step.seqs[before].n_tokens;
  }
  // Prompt chunks that reach their last token and admissions ask for logits rows too: when the step now has
  // more than the executor returns, drafts give rows back, the last-scheduled first.
  int64_t logit_rows = logit_rows_of(step);
  for (size_t j = step.seqs.size(); j-- > 0 && logit_rows > cfg_.max_logit_rows;) {
    StepSeq& q = step.seqs[j];
    const int64_t cut = std::min<int64_t>(q.draft, logit_rows - cfg_.max_logit_rows);
    q.draft -= static_cast<int32_t>(cut);
    q.n_tokens -= cut;
    step.n_tokens -= cut;
    logit_rows -= cut;
  }
  return step;
}

void Scheduler::commit(const Step& step) {
  for (SchedEntry* e : step.who) {
    // Publish first: a block the window releases next is then cached under its hash, not lost (its content is
    // final). A preempted sequence is not in step.who.
    if (cfg_.prefix_caching) e->kv->publish_full_blocks(e->tokens->data());
    released_blocks_ += static_cast<uint64_t>(e->kv->release_outside_window());
  }
}

std::string Scheduler::audit() const {
  std::vector<int32_t> refs(static_cast<size_t>(pool_->n_blocks()), 0);
  for (const SchedEntry* e : running_)
    for (int32_t b : e->kv->block_table())
      if (b != KvPages::kReleased) ++refs[static_cast<size_t>(b)];
  for (const SchedEntry* e : waiting_)
    if (e->kv && !e->kv->block_table().empty())
      return absl::StrCat("a waiting sequence holds ", e->kv->blocks_held(), " blocks (table of ",
                          e->kv->block_table().size(), ")");
  for (const SchedEntry* e : running_) {  // a released entry is a prefix of the table, and below the window
    const SequenceKv& kv = *e->kv;
    for (int64_t i = 0; i < static_cast<int64_t>(kv.block_table().size()); ++i)
      if ((kv.block_table()[static_cast<size_t>(i)] == KvPages::kReleased) != (i < kv.n_released()))
        return absl::StrCat("block table entry ", i, " of a sequence with ", kv.n_released(), " released entries");
    if (kv.n_released() * kv.block_tokens() > kv.window_start())
      return absl::StrCat("a sequence released positions below ", kv.n_released() * kv.block_tokens(),
                          " but its window starts at ", kv.window_start());
  }
  int64_t used = 0;
  for (int64_t b = 0; b < pool_->n_blocks(); ++b) {
    const int32_t want = refs[static_cast<size_t>(b)];
    if (pool_->ref_count(static_cast<int32_t>(b)) != want)
      return absl::StrCat("block ", b, " has ", pool_->ref_count(static_cast<int32_t>(b)), " references, ", want,
                          " running sequences hold it");
    used += want > 0 ? 1 : 0;
  }
  const KvPoolStats s = pool_->stats();
  if (s.n_used != used || s.n_used + s.n_cached + s.n_free != s.n_blocks)
    return absl::StrCat("pool counts used ", s.n_used, " (held: ", used, ") cached ", s.n_cached, " free ", s.n_free,
                        " of ", s.n_blocks);
  return "";
}

}  // namespace frost
