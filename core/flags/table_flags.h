#pragma once
// The argv front end of typed fields (core/common/config_fields.h): flag rows (core/flags/flags.h) made from
// a ConfigTable's rows, for a program whose flags mirror a struct's fields. The row gives the flag its value
// placeholder ("N", "X", "true|false"), its help (the row's doc, range and the value the program starts
// from) and its parsing: the value goes through the table, so a bad one is refused with the table's range
// or type, named by the flag ("--top-k: must be >= 0, got -1"; `--seed: expected an unsigned integer, got
// "x"`, the wording of cli::bad_value). A flag is then declared once, as the struct's field: see
// docs/architecture.md, "Worked example: adding a config field, a flag or a request field".
//
// Header-only: frost_flags itself stays Abseil-only; a program that includes this also includes the table's
// struct (and nlohmann/json, which config_fields.h uses).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/common/config_fields.h"
#include "core/flags/flags.h"

namespace frost::cli {

// "--top-k" for the row "top_k".
inline std::string flag_name_of(const std::string& key) {
  return absl::StrCat("--", absl::StrReplaceAll(key, {{"_", "-"}, {".", "-"}}));
}

// The flag of the row `key` of `table` (which outlives it: tables are function-local statics), setting it in
// `*target`. Its help shows `*target`'s value when the
// table is made (the program's default, which may differ from the struct's: frost-bench's per-mode
// temperature). A key the table lacks is a programming error (the process aborts naming it, as a malformed
// flag table does).
template <typename C>
Flag table_flag(const ConfigTable<C>& table, const std::string& key, C* target, std::string name = "") {
  const ConfigField<C>* row = table.find(key);
  if (row == nullptr) {
    std::fprintf(stderr, "table_flag: %s has no field '%s'\n", table.what().c_str(), key.c_str());
    std::abort();
  }
  if (name.empty()) name = flag_name_of(key);
  std::vector<std::string> notes;
  if (!row->range.empty()) notes.push_back(row->range);
  if (!row->present || row->present(*target))
    notes.push_back(absl::StrCat("default ", ConfigTable<C>::value_text(*row, *target)));
  Flag f;
  f.name = name;
  f.takes_value = true;
  f.value_name = row->value_name;
  f.help = notes.empty() ? row->help : absl::StrCat(row->help, " (", absl::StrJoin(notes, "; "), ")");
  f.apply = [&table, key, target, name](const std::string& value) {
    return table.apply_as(*target, key, FieldInput::of(value), name);
  };
  return f;
}

// The flags of the rows `keys`, in that order.
template <typename C>
std::vector<Flag> table_flags(const ConfigTable<C>& table, const std::vector<std::string>& keys, C* target) {
  std::vector<Flag> out;
  for (const std::string& k : keys) out.push_back(table_flag(table, k, target));
  return out;
}

}  // namespace frost::cli
