// frost-tokenize: frost's side of tests/tokenizers/hf_agreement_test.py, and a way to look at what a
// tokenizer does to a text. Reads JSON Lines of strings (tests/tokenizers/make_corpus.py) and writes, for
// each, one JSON object:
//   {"ids": encode_with_specials(text), "plain": encode(text), "decoded": decode(ids)}
// (tokenizer.h: "ids" parses the text of special tokens as Hugging Face's default does; "plain" is what a
// prompt gets, special-token text left as text).
//
//   frost-tokenize MODEL_DIR_OR_TOKENIZER_JSON IN.jsonl OUT.jsonl
//
// A directory is loaded like a model's (tokenizer.model first, else tokenizer.json); a file path is read as a
// tokenizer.json.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/model/tokenizer.h"
#include "core/model/tokenizer_bpe.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: frost-tokenize MODEL_DIR_OR_TOKENIZER_JSON IN.jsonl OUT.jsonl\n";
    return 2;
  }
  const std::string src = argv[1];
  std::unique_ptr<frost::Tokenizer> tok;
  std::error_code ec;
  if (std::filesystem::is_directory(src, ec)) {
    auto t = frost::load_tokenizer(src, frost::TokenizerPreference::kAuto);
    if (!t.ok()) {
      std::cerr << "frost-tokenize: " << t.status() << "\n";
      return 1;
    }
    tok = *std::move(t);
  } else {
    auto t = frost::BpeTokenizer::load(src);
    if (!t.ok()) {
      std::cerr << "frost-tokenize: " << t.status() << "\n";
      return 1;
    }
    tok = *std::move(t);
  }
  std::ifstream in(argv[2]);
  std::ofstream out(argv[3]);
  if (!in || !out) {
    std::cerr << "frost-tokenize: cannot open " << (!in ? argv[2] : argv[3]) << "\n";
    return 1;
  }
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::string text;
    try {
      text = nlohmann::json::parse(line).get<std::string>();
    } catch (const std::exception& e) {
      std::cerr << "frost-tokenize: " << argv[2] << ":" << n + 1 << ": expected a JSON string: " << e.what() << "\n";
      return 1;
    }
    auto ids = tok->encode_with_specials(text, false);
    auto plain = tok->encode(text, false);
    if (!ids.ok() || !plain.ok()) {
      std::cerr << "frost-tokenize: line " << n + 1 << ": " << (ids.ok() ? plain.status() : ids.status()) << "\n";
      return 1;
    }
    nlohmann::json o;
    o["ids"] = *ids;
    o["plain"] = *plain;
    o["decoded"] = tok->decode(*ids);
    out << o.dump() << "\n";
    ++n;
  }
  std::cerr << "frost-tokenize: " << n << " lines, vocab " << tok->vocab_size() << " (" << tok->kind() << ")\n";
  return out ? 0 : 1;
}
