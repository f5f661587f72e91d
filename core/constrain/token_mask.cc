#include "core/constrain/token_mask.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace frost::constrain {
namespace {

// Past this many arena nodes the matcher drops the ones the current state no longer uses (trie walks
// intern nodes for every prefix they try).
constexpr size_t kCompactArenaNodes = size_t{1} << 16;

}  // namespace

int32_t TokenBitmask::count() const {
  int32_t n = 0;
  for (uint32_t w : words) n += __builtin_popcount(w);
  return n;
}

// ---- TokenVocab ----

absl::StatusOr<std::shared_ptr<const TokenVocab>> TokenVocab::create(std::vector<std::string> token_bytes,
                                                                   std::vector<bool> special,
                                                                   std::vector<int32_t> eos_ids) {
  const size_t n = token_bytes.size();
  if (n > static_cast<size_t>(INT32_MAX / 2)) {
    return absl::InvalidArgumentError(absl::StrCat("token vocabulary of ", n, " tokens is too large"));
  }
  if (special.empty()) special.assign(n, false);
  if (special.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("special flags: ", special.size(), " entries for ", n, " tokens"));
  }
  for (int32_t id : eos_ids) {
    if (id < 0 || static_cast<size_t>(id) >= n) {
      return absl::InvalidArgumentError(absl::StrCat("eos id ", id, " out of range [0, ", n, ")"));
    }
  }
  std::shared_ptr<TokenVocab> v(new TokenVocab());
  v->bytes_ = std::move(token_bytes);
  v->special_ = std::move(special);
  v->eos_ids_ = std::move(eos_ids);
  // Sorted byte strings make the trie a preorder walk: a new string shares its longest common prefix with
  // the previous one, and identical strings (duplicate tokens) end at the same node, contiguously.
  std::vector<int32_t> order;
  for (size_t id = 0; id < n; ++id) {
    if (!v->special_[id] && !v->bytes_[id].empty() && !v->is_eos(static_cast<int32_t>(id))) {
      order.push_back(static_cast<int32_t>(id));
    }
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return v->bytes_[a] != v->bytes_[b] ? v->bytes_[a] < v->bytes_[b] : a < b;
  });
  std::vector<uint32_t> path;  // node index per depth - 1
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = v->bytes_[id];
    size_t lcp = 0;
    if (prev != nullptr) {
      while (lcp < prev->size() && lcp < s.size() && (*prev)[lcp] == s[lcp]) ++lcp;
    }
    while (path.size() > lcp) {
      v->trie_[path.back()].subtree_end = static_cast<uint32_t>(v->trie_.size());
      path.pop_back();
    }
    for (size_t d = lcp; d < s.size(); ++d) {
      path.push_back(static_cast<uint32_t>(v->trie_.size()));
      v->trie_.push_back({static_cast<uint8_t>(s[d]), static_cast<uint32_t>(d + 1), 0, 0, 0});
    }
    TrieNode& node = v->trie_[path.back()];
    const auto k = static_cast<uint32_t>(v->trie_tokens_.size());
    if (node.tokens_begin == node.tokens_end) node.tokens_begin = k;
    node.tokens_end = k + 1;
    v->trie_tokens_.push_back(id);
    v->max_depth_ = std::max<uint32_t>(v->max_depth_, static_cast<uint32_t>(s.size()));
    prev = &s;
  }
  for (uint32_t i : path) v->trie_[i].subtree_end = static_cast<uint32_t>(v->trie_.size());
  return std::shared_ptr<const TokenVocab>(std::move(v));
}

int32_t TokenVocab::longest_prefix_token(absl::string_view text, const TokenBitmask& allowed) const {
  int32_t best = -1;
  size_t i = 0, end = trie_.size();  // the siblings at this depth: [i, end), subtrees skipped
  for (size_t d = 0; d < text.size(); ++d) {
    const auto byte = static_cast<uint8_t>(text[d]);
    while (i < end && trie_[i].byte != byte) i = trie_[i].subtree_end;
    if (i >= end) break;
    const TrieNode& node = trie_[i];
    for (uint32_t t = node.tokens_end; t > node.tokens_begin; --t) {
      if (allowed.test(trie_tokens_[t - 1])) {
        best = trie_tokens_[t - 1];
        break;
      }
    }
    end = node.subtree_end;
    ++i;  // its first child, if any
  }
  return best;
}

bool TokenVocab::is_eos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

// ---- MaskCache ----

std::shared_ptr<const StateMask> MaskCache::find(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void MaskCache::insert(const std::string& key, std::shared_ptr<const StateMask> mask) {
  if (max_entries_ == 0) return;
  absl::MutexLock lock(&mu_);
  if (index_.contains(key)) return;  // another matcher computed the same state meanwhile
  lru_.emplace_front(key, std::move(mask));
  index_[key] = lru_.begin();
  bytes_ += entry_bytes(lru_.front());
  while (lru_.size() > max_entries_) {
    bytes_ -= entry_bytes(lru_.back());
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

MaskCache::Stats MaskCache::stats() const {
  absl::MutexLock lock(&mu_);
  return {hits_, misses_, static_cast<int64_t>(lru_.size()), bytes_};
}

// ---- Matcher ----

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab,
                 std::shared_ptr<MaskCache> cache)
    : vocab_(std::move(vocab)), cache_(std::move(cache)), rec_(std::move(grammar)) {}

const TokenBitmask& Matcher::allowed() {
  if (mask_ != nullptr) return mask_->bits;
  if (finished_) {
    mask_ = std::make_shared<const StateMask>(vocab_->n_tokens());
    return mask_->bits;
  }
  std::string key;
  if (cache_ != nullptr) {
    key = rec_.canonical_key(rec_.state());
    mask_ = cache_->find(key);
    if (mask_ != nullptr) return mask_->bits;
  }
  auto mask = std::make_shared<StateMask>(vocab_->n_tokens());
  compute(mask.get());
  mask_ = mask;
  // The stack limits depend only on the state, so a mask they truncated is as cacheable as any other —
  // its over_limit mark travels with it.
  if (cache_ != nullptr) cache_->insert(key, mask_);
  return mask_->bits;
}

void Matcher::compute(StateMask* out) {
  ++n_computed_;
  TokenBitmask* mask = &out->bits;
  const Recognizer::StackSet& state = rec_.state();
  if (Recognizer::is_accepting(state)) {
    for (int32_t id : vocab_->eos_ids()) mask->set(id);
  }
  const auto& trie = vocab_->trie();
  const auto& tokens = vocab_->trie_tokens();
  const ByteSet first = rec_.next_bytes();
  levels_.resize(vocab_->max_depth() + 1);
  levels_[0] = rec_.intern_state(state);
  // Preorder walk: node i's parent state is levels_[depth - 1], the last state reached at that depth.
  // States are interned, so each step is one memo lookup once the (state, byte) pair was seen — inside a
  // string nearly every trie node maps to the same few states.
  Recognizer::Limit over = Recognizer::Limit::kNone;
  bool any = Recognizer::is_accepting(state) && !vocab_->eos_ids().empty();
  for (size_t i = 0; i < trie.size();) {
    const auto& node = trie[i];
    const uint32_t next = (node.depth == 1 && !first.test(node.byte))
                              ? Recognizer::kDeadState
                              : rec_.advance_interned(levels_[node.depth - 1], node.byte);
    if (next >= Recognizer::kOverDepthState) {  // dead, or over a limit
      if (next != Recognizer::kDeadState) {
        over = next == Recognizer::kOverDepthState ? Recognizer::Limit::kDepth : Recognizer::Limit::kStacks;
      }
      i = node.subtree_end;  // no token under a dead prefix can be allowed
      continue;
    }
    levels_[node.depth] = next;
    for (uint32_t t = node.tokens_begin; t < node.tokens_end; ++t) mask->set(tokens[t]);
    any |= node.tokens_begin != node.tokens_end;
    ++i;
  }
  out->over_limit = over;
  out->empty = !any;
}

absl::Status Matcher::too_ambiguous(Recognizer::Limit limit) const {
  return absl::InvalidArgumentError(absl::StrCat("constraint too ambiguous to track exactly after ", n_bytes_,
                                                 " output bytes: ", rec_.describe_limit(limit)));
}

absl::Status Matcher::health() const {
  if (accept_limit_ != Recognizer::Limit::kNone) return too_ambiguous(accept_limit_);
  if (finished_ || mask_ == nullptr) return absl::OkStatus();
  if (mask_->over_limit != Recognizer::Limit::kNone) return too_ambiguous(mask_->over_limit);
  if (mask_->empty && !rec_.must_end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no token of the vocabulary can continue the output the constraint requires after ", n_bytes_,
                     " bytes (next bytes allowed: ", describe_bytes(rec_.next_bytes()), ")"));
  }
  return absl::OkStatus();
}

TokenBitmask Matcher::allowed_brute_force() {
  TokenBitmask mask(vocab_->n_tokens());
  if (finished_) return mask;
  const Recognizer::StackSet start = rec_.state();
  Recognizer::StackSet cur, next;
  for (int32_t id = 0; id < vocab_->n_tokens(); ++id) {
    if (vocab_->is_eos(id)) {
      if (Recognizer::is_accepting(start)) mask.set(id);
      continue;
    }
    if (vocab_->is_special(id) || vocab_->bytes(id).empty()) continue;
    cur = start;
    bool ok = true;
    for (char c : vocab_->bytes(id)) {
      ok = rec_.advance_from(cur, static_cast<uint8_t>(c), &next) == Recognizer::Advance::kOk;
      if (!ok) break;
      std::swap(cur, next);
    }
    if (ok) mask.set(id);
  }
  return mask;
}

absl::Status Matcher::accept_token(int32_t id) {
  if (id < 0 || id >= vocab_->n_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", id, " out of range [0, ", vocab_->n_tokens(), ")"));
  }
  if (finished_) return absl::FailedPreconditionError(absl::StrCat("token ", id, " after the end of the output"));
  if (vocab_->is_eos(id)) {
    if (!rec_.accepting()) {
      return absl::FailedPreconditionError(absl::StrCat("end-of-sequence token ", id, " before the output is complete"));
    }
    finished_ = true;
    mask_ = nullptr;
    return absl::OkStatus();
  }
  const std::string& bytes = vocab_->bytes(id);
  const bool known_bad = mask_ != nullptr && !mask_->bits.test(id);
  if (known_bad || vocab_->is_special(id) || bytes.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("token ", id, " ('", absl::CHexEscape(bytes),
                                                      "') is not allowed by the constraint here"));
  }
  Recognizer::StackSet cur = rec_.state(), next;
  for (char c : bytes) {
    const Recognizer::Advance st = rec_.advance_from(cur, static_cast<uint8_t>(c), &next);
    if (st == Recognizer::Advance::kOverLimit) {
      accept_limit_ = rec_.last_limit();
      return too_ambiguous(accept_limit_);
    }
    if (st != Recognizer::Advance::kOk) {
      return absl::FailedPreconditionError(absl::StrCat("token ", id, " ('", absl::CHexEscape(bytes),
                                                        "') is not allowed by the constraint here"));
    }
    std::swap(cur, next);
  }
  rec_.set_state(std::move(cur));
  n_bytes_ += static_cast<int64_t>(bytes.size());
  mask_ = nullptr;
  if (!marked_ && rec_.arena_size() > kCompactArenaNodes) rec_.compact();
  return absl::OkStatus();
}

std::string Matcher::forced_bytes(size_t max_bytes) {
  std::string out;
  if (finished_) return out;
  Recognizer::StackSet cur = rec_.state(), next;
  while (out.size() < max_bytes && !Recognizer::is_accepting(cur)) {
    const ByteSet next_bytes = rec_.next_bytes_of(cur);
    if (next_bytes.count() != 1) break;
    int byte = 0;
    while (!next_bytes.test(static_cast<size_t>(byte))) ++byte;
    if (rec_.advance_from(cur, static_cast<uint8_t>(byte), &next) != Recognizer::Advance::kOk) break;
    out.push_back(static_cast<char>(byte));
    std::swap(cur, next);
  }
  return out;
}

int32_t Matcher::jump_token(size_t max_bytes) {
  const std::string text = forced_bytes(max_bytes);
  if (text.empty()) return -1;
  return vocab_->longest_prefix_token(text, allowed());
}

Matcher::Mark Matcher::mark() {
  marked_ = true;
  Mark m;
  m.state = rec_.state();
  m.mask = mask_;
  m.finished = finished_;
  m.accept_limit = accept_limit_;
  m.n_bytes = n_bytes_;
  return m;
}

void Matcher::rewind(Mark m) {
  rec_.set_state(std::move(m.state));
  mask_ = std::move(m.mask);
  finished_ = m.finished;
  accept_limit_ = m.accept_limit;
  n_bytes_ = m.n_bytes;
  marked_ = false;
}

}  // namespace frost::constrain
