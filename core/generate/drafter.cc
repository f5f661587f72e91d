#include "core/generate/drafter.h"

#include <algorithm>
#include <cmath>

namespace frost {

// ---- IndexedDrafter: the sync protocol ----

void IndexedDrafter::propose(absl::Span<const int32_t> tokens, int k, std::vector<int32_t>* out) {
  if (tokens.size() < seq_.size()) truncate(tokens.size());
  if (!seq_.empty() && tokens[seq_.size() - 1] != seq_.back()) {
    // A rewrite without truncate(): roll back to the first difference.
    size_t i = 0;
    while (i < seq_.size() && tokens[i] == seq_[i]) ++i;
    truncate(i);
  }
  if (tokens.size() > seq_.size() + 1) on_reserve(tokens.size());  // a prompt, or a catch-up after a pause
  while (seq_.size() < tokens.size()) {
    seq_.push_back(tokens[seq_.size()]);
    on_append();
  }
  if (k > 0 && !seq_.empty()) draft(k, out);
}

void IndexedDrafter::truncate(size_t n) {
  while (seq_.size() > n) {
    on_pop();
    seq_.pop_back();
  }
}

// ---- PromptLookupDrafter ----

namespace {

uint64_t mix(uint64_t h) {  // splitmix64's finalizer
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

constexpr int kMaxChain = 16;  // collision links followed per lookup

}  // namespace

PromptLookupDrafter::PromptLookupDrafter(const PromptLookupOptions& options) : opt_(options) {
  opt_.min_ngram = std::max(1, opt_.min_ngram);
  opt_.max_ngram = std::max(opt_.min_ngram, opt_.max_ngram);
  m_ = opt_.max_ngram - opt_.min_ngram + 1;
}

uint64_t PromptLookupDrafter::hash(int n, size_t end) const {
  uint64_t h = mix(static_cast<uint64_t>(n) + 0x9e3779b97f4a7c15ULL);
  for (size_t i = end - n; i < end; ++i) h = mix(h ^ static_cast<uint32_t>(seq_[i]));
  return h;
}

bool PromptLookupDrafter::same(int n, size_t a, size_t b) const {
  return std::equal(seq_.begin() + (a - n), seq_.begin() + a, seq_.begin() + (b - n));
}

void PromptLookupDrafter::on_append() {
  const size_t end = seq_.size();
  for (int j = 0; j < m_; ++j) {
    const int n = opt_.min_ngram + j;
    int32_t prev = -1;
    if (static_cast<size_t>(n) <= end) {
      auto [it, inserted] = last_.try_emplace(hash(n, end), static_cast<int32_t>(end));
      if (!inserted) {
        prev = it->second;
        it->second = static_cast<int32_t>(end);
      }
    }
    prev_.push_back(prev);
  }
}

void PromptLookupDrafter::on_pop() {
  const size_t end = seq_.size();
  for (int j = m_ - 1; j >= 0; --j) {
    const int n = opt_.min_ngram + j;
    if (static_cast<size_t>(n) > end) continue;
    const int32_t prev = prev_[end * m_ + j - m_];  // prev_ holds positions 1..end at [(e - 1) * m_]
    const uint64_t h = hash(n, end);
    if (prev < 0) {
      last_.erase(h);
    } else {
      last_[h] = prev;
    }
  }
  prev_.resize(prev_.size() - m_);
}

void PromptLookupDrafter::draft(int k, std::vector<int32_t>* out) {
  const size_t len = seq_.size();
  for (int n = opt_.max_ngram; n >= opt_.min_ngram; --n) {
    if (static_cast<size_t>(n) > len) continue;
    const int j = n - opt_.min_ngram;
    // The chain of earlier ends of n-grams hashing like the last one; the first equal one is the most recent.
    int32_t p = prev_[(len - 1) * m_ + j];
    for (int step = 0; p >= 0 && step < kMaxChain && !same(n, static_cast<size_t>(p), len); ++step) {
      p = prev_[(static_cast<size_t>(p) - 1) * m_ + j];
    }
    if (p < 0 || !same(n, static_cast<size_t>(p), len)) continue;
    const size_t base = out->size();
    for (int i = 0; i < k; ++i) {
      const size_t at = static_cast<size_t>(p) + i;
      const int32_t t = at < len ? seq_[at] : (*out)[base + (at - len)];
      if (t < 0 || t >= opt_.vocab_size) break;
      out->push_back(t);
    }
    return;
  }
}

// ---- SuffixTrie ----

SuffixTrie::SuffixTrie(int max_depth) : max_depth_(std::max(1, max_depth)) { nodes_.emplace_back(); }

void SuffixTrie::reserve(size_t tokens) {
  // Fresh text adds about one node per depth per token; a trie that has to grow its hash table and node pool
  // while indexing a prompt token by token pays each rehash and copy on the engine thread (a 300-token
  // prompt: ~4,800 nodes, seven doublings).
  const size_t want = nodes() + tokens * static_cast<size_t>(max_depth_);
  if (want > edges_.capacity()) edges_.reserve(want);
  if (want + 1 > nodes_.capacity()) nodes_.reserve(want + 1);
}

bool SuffixTrie::better(int32_t a, int32_t b) const {
  const Node& x = nodes_[a];
  const Node& y = nodes_[b];
  return x.count > y.count || (x.count == y.count && x.token < y.token);
}

int32_t SuffixTrie::add(int32_t parent, int32_t token) {
  auto [it, inserted] = edges_.try_emplace(key(parent, token), 0);
  if (inserted) {
    int32_t id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
      nodes_[id] = Node();
    } else {
      id = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    Node& c = nodes_[id];
    c.parent = parent;
    c.token = token;
    c.next = nodes_[parent].first;
    if (c.next >= 0) nodes_[c.next].prev = id;
    nodes_[parent].first = id;
    it->second = id;
  }
  const int32_t id = it->second;
  ++nodes_[id].count;
  Node& p = nodes_[parent];
  ++p.cont;
  if (parent != 0 && (p.best < 0 || (p.best != id && better(id, p.best)))) p.best = id;
  return id;
}

void SuffixTrie::rescan_best(int32_t node) {
  int32_t best = -1;
  for (int32_t c = nodes_[node].first; c >= 0; c = nodes_[c].next) {
    if (best < 0 || better(c, best)) best = c;
  }
  nodes_[node].best = best;
}

void SuffixTrie::remove_one(int32_t id) {
  Node& n = nodes_[id];
  const int32_t parent = n.parent;
  --n.count;
  --nodes_[parent].cont;
  if (n.count == 0) {
    // No children left: a child's count never exceeds its parent's.
    if (n.prev >= 0) {
      nodes_[n.prev].next = n.next;
    } else {
      nodes_[parent].first = n.next;
    }
    if (n.next >= 0) nodes_[n.next].prev = n.prev;
    edges_.erase(key(parent, n.token));
    free_.push_back(id);
    n.count = -1;  // not a live node; keeps better() away from it
  }
  if (parent != 0 && nodes_[parent].best == id) rescan_best(parent);
}

void SuffixTrie::append(std::vector<int32_t>* active, int32_t token) {
  std::vector<int32_t>& a = *active;
  const size_t n = std::min(a.size() + 1, static_cast<size_t>(max_depth_));
  a.resize(n);
  for (size_t d = n - 1; d >= 1; --d) a[d] = add(a[d - 1], token);
  a[0] = add(0, token);
}

void SuffixTrie::pop(std::vector<int32_t>* active, absl::Span<const int32_t> text) {
  std::vector<int32_t>& a = *active;
  const size_t end = text.size();  // the popped token is text[end - 1]
  // The new suffix nodes: the parents of the old ones (depth d + 1 → d), and depth D from the root.
  std::vector<int32_t> parents(a.size() > 1 ? a.size() - 1 : 0);
  for (size_t d = 1; d < a.size(); ++d) parents[d - 1] = nodes_[a[d]].parent;
  for (int32_t id : a) remove_one(id);
  const size_t depth = static_cast<size_t>(max_depth_);
  if (a.size() == depth && end - 1 >= depth) {
    parents.push_back(find(text.subspan(end - 1 - depth, depth)));
  }
  a = std::move(parents);
}

void SuffixTrie::suffix_nodes(absl::Span<const int32_t> text, std::vector<int32_t>* active) const {
  active->clear();
  const size_t n = std::min(text.size(), static_cast<size_t>(max_depth_));
  for (size_t d = 1; d <= n; ++d) active->push_back(find(text.subspan(text.size() - d)));
}

size_t SuffixTrie::bytes() const {
  // A flat_hash_map slot is the (key, value) pair plus one control byte.
  return nodes_.capacity() * sizeof(Node) + free_.capacity() * sizeof(int32_t) +
         edges_.capacity() * (sizeof(std::pair<const uint64_t, int32_t>) + 1);
}

int32_t SuffixTrie::find(absl::Span<const int32_t> path) const {
  int32_t node = 0;
  for (int32_t t : path) {
    auto it = edges_.find(key(node, t));
    if (it == edges_.end()) return -1;
    node = it->second;
  }
  return node;
}

int32_t SuffixTrie::match(absl::Span<const int32_t> text, int max_len, int* len, int guess) const {
  // "Occurs with a continuation" holds for every suffix of a string it holds for: binary search the length,
  // after testing the guess (which halves the range it falls in, or ends the search at the top).
  int lo = 0, hi = std::min<int>(max_len, std::min<int>(static_cast<int>(text.size()), max_depth_ - 1));
  int32_t found = -1;
  auto holds = [&](int n) {
    const int32_t node = find(text.subspan(text.size() - n));
    if (node >= 0 && nodes_[node].cont > 0) {
      found = node;
      return true;
    }
    return false;
  };
  guess = std::min(guess, hi);  // a match that keeps going stays at the cap: test the cap first
  if (guess > 0) {
    if (holds(guess)) {
      lo = guess;
    } else {
      hi = guess - 1;
    }
  }
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (holds(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  // `found` is the node of the last length that held, which is lo (every later test that held raised lo).
  *len = lo;
  return lo > 0 ? found : -1;
}

double SuffixTrie::walk(int32_t node, int max_tokens, double min_prob, int32_t vocab_size,
                        std::vector<int32_t>* out) const {
  double prob = 1.0, score = 0.0;
  for (int i = 0; i < max_tokens; ++i) {
    const Node& n = nodes_[node];
    if (n.cont <= 0 || n.best < 0) break;
    const Node& c = nodes_[n.best];
    prob *= static_cast<double>(c.count) / n.cont;
    if (prob < min_prob || c.token < 0 || c.token >= vocab_size) break;
    out->push_back(c.token);
    score += prob;
    node = n.best;
  }
  return score;
}

int suffix_match_cap(int max_depth, int k) { return std::max(1, max_depth - std::max(1, k)); }

int suffix_spec_limit(const SuffixOptions& opt, int match_len, int k) {
  const double cap = opt.max_spec_factor * match_len + opt.max_spec_offset + 1e-6;
  return std::max(0, std::min(k, static_cast<int>(std::floor(cap))));
}

// ---- SuffixCache ----

SuffixCache::SuffixCache(int max_depth, size_t budget_tokens) : budget_(budget_tokens), trie_(max_depth) {}

void SuffixCache::insert(absl::Span<const int32_t> output) {
  if (output.size() > budget_) output = output.subspan(output.size() - budget_);
  if (output.empty()) return;
  absl::MutexLock writer(&insert_mu_);
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (tokens_ + output.size() <= budget_) break;
    }
    evict_oldest();
  }
  std::vector<int32_t> active;
  for (size_t i = 0; i < output.size();) {
    absl::MutexLock lock(&mu_);
    for (const size_t end = std::min(output.size(), i + kChunk); i < end; ++i)
      trie_.append(&active, output[i]);
  }
  absl::MutexLock lock(&mu_);
  held_.emplace_back(output.begin(), output.end());
  tokens_ += output.size();
}

void SuffixCache::evict_oldest() {
  // Only this inserter changes held_, so the front stays put between the chunks.
  const std::vector<int32_t>* text;
  std::vector<int32_t> active;
  {
    absl::MutexLock lock(&mu_);
    text = &held_.front();
    trie_.suffix_nodes(*text, &active);
  }
  for (size_t end = text->size(); end > 0;) {
    absl::MutexLock lock(&mu_);
    for (size_t n = 0; n < kChunk && end > 0; ++n, --end)
      trie_.pop(&active, absl::MakeConstSpan(*text).first(end));
  }
  absl::MutexLock lock(&mu_);
  tokens_ -= text->size();
  held_.pop_front();
}

double SuffixCache::propose(absl::Span<const int32_t> text, int k, const SuffixOptions& opt,
                            std::vector<int32_t>* out, int* match_len) const {
  // Never waits: while an inserter holds the trie (one chunk) the proposal goes without the shared cache. The
  // engine thread must not wait on the delivery thread's indexing, and a draft is only a guess.
  if (!mu_.ReaderTryLock()) return 0.0;
  struct Unlock {
    absl::Mutex& m;
    ~Unlock() { m.ReaderUnlock(); }
  } unlock{mu_};
  int len = 0;
  const int32_t node = trie_.match(text, std::min(opt.max_match, suffix_match_cap(trie_.max_depth(), k)),
                                   &len, match_len != nullptr ? *match_len : -1);
  if (match_len != nullptr) *match_len = len;
  if (node < 0) return 0.0;
  return trie_.walk(node, suffix_spec_limit(opt, len, k), opt.min_prob, opt.vocab_size, out);
}

size_t SuffixCache::tokens() const {
  absl::ReaderMutexLock lock(&mu_);
  return tokens_;
}

size_t SuffixCache::requests() const {
  absl::ReaderMutexLock lock(&mu_);
  return held_.size();
}

size_t SuffixCache::bytes() const {
  absl::ReaderMutexLock lock(&mu_);
  size_t b = trie_.bytes();
  for (const std::vector<int32_t>& r : held_) b += r.capacity() * sizeof(int32_t);
  return b;
}

size_t SuffixCache::nodes() const {
  absl::ReaderMutexLock lock(&mu_);
  return trie_.nodes();
}

// ---- SuffixDrafter ----

SuffixDrafter::SuffixDrafter(const SuffixOptions& options, const SuffixCache* shared)
    : opt_(options), shared_(shared), trie_(options.max_depth) {}

void SuffixDrafter::on_append() { trie_.append(&active_, seq_.back()); }

void SuffixDrafter::on_pop() { trie_.pop(&active_, seq_); }

void SuffixDrafter::on_reserve(size_t tokens) {
  seq_.reserve(tokens + 256);
  trie_.reserve(tokens - std::min(tokens, seq_.size()));
}

void SuffixDrafter::draft(int k, std::vector<int32_t>* out) {
  // Own trie: the deepest current suffix (≤ max_match, ≤ D - k) with a continuation.
  double own_score = 0.0;
  scratch_.clear();
  const int max_len = std::min<int>(
      {opt_.max_match, suffix_match_cap(trie_.max_depth(), k), static_cast<int>(active_.size())});
  for (int d = max_len; d >= 1; --d) {
    if (trie_.continues(active_[d - 1])) {
      own_score = trie_.walk(active_[d - 1], suffix_spec_limit(opt_, d, k), opt_.min_prob, opt_.vocab_size,
                             &scratch_);
      break;
    }
  }
  if (shared_ != nullptr) {
    const size_t base = out->size();
    // The guess: last step's match grown by the tokens since (a sequence copying a cached output keeps
    // matching); one lookup path instead of a binary search's four when it holds at the top.
    int len = shared_len_ < 0
                  ? -1
                  : shared_len_ + static_cast<int>(seq_.size() - std::min(seq_.size(), shared_at_));
    const double shared_score = shared_->propose(seq_, k, opt_, out, &len);
    shared_len_ = len;
    shared_at_ = seq_.size();
    if (shared_score > own_score) return;
    out->resize(base);
  }
  out->insert(out->end(), scratch_.begin(), scratch_.end());
}

}  // namespace frost
