#include "core/model/tool_calls.h"

#include <cstring>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "core/common/json.h"

namespace frost {
namespace {

// Nesting bound for a call's JSON (objects + arrays): the call object, its arguments and 62 levels inside
// them.
constexpr int kMaxDepth = 64;
// The longest N accepted in "[TOOL_CALLS]N[ARGS]" (function names are short identifiers).
constexpr size_t kMaxMistralName = 256;

constexpr char kToolCallOpen[] = "<tool_call>";
constexpr char kToolCallClose[] = "</tool_call>";
constexpr char kPythonTag[] = "<|python_tag|>";
constexpr char kToolCallsMarker[] = "[TOOL_CALLS]";
constexpr char kArgsMarker[] = "[ARGS]";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

// `t` (valid JSON) without the whitespace outside its strings: the model's bytes otherwise.
std::string compact_json(std::string_view t) {
  std::string out;
  out.reserve(t.size());
  JsonStringState strings;
  for (char c : t) {
    if (!strings.step(c) && is_ws(c)) continue;
    out.push_back(c);
  }
  return out;
}

// The spans of the elements of `t`, a valid JSON array.
std::vector<std::string_view> array_elements(std::string_view t) {
  std::vector<std::string_view> out;
  int depth = 0;
  JsonStringState strings;
  size_t begin = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (strings.step(c)) continue;
    switch (c) {
      case '{':
      case '[':
        if (++depth == 1) begin = i + 1;
        break;
      case '}':
      case ']':
        if (--depth == 0) out.push_back(t.substr(begin, i - begin));
        break;
      case ',':
        if (depth == 1) {
          out.push_back(t.substr(begin, i - begin));
          begin = i + 1;
        }
        break;
      default:
        break;
    }
  }
  // Element spans carry the whitespace around them; json_value_span and compact_json skip it.
  for (std::string_view& e : out) {
    while (!e.empty() && is_ws(e.front())) e.remove_prefix(1);
    while (!e.empty() && is_ws(e.back())) e.remove_suffix(1);
  }
  return out;
}

// The arguments as compact JSON text: `value` (parsed from `raw`) an object, or a string whose text is one.
std::optional<std::string> arguments_text(const nlohmann::json& value, std::string_view raw) {
  if (value.is_object()) return compact_json(raw);
  if (!value.is_string()) return std::nullopt;
  const std::string& inner = value.get_ref<const std::string&>();
  nlohmann::json j;
  if (parse_json_bounded(inner, kMaxDepth, &j) || !j.is_object()) return std::nullopt;
  return compact_json(inner);
}

// A call object {"name": N, "arguments"|"parameters": {...}}: `j` parsed from `raw`.
std::optional<ToolCall> call_from_parsed(const nlohmann::json& j, std::string_view raw) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : j.contains("parameters") ? "parameters" : nullptr;
  if (key == nullptr) return std::nullopt;
  const std::optional<std::string_view> span = json_value_span(raw, {key});
  if (!span) return std::nullopt;
  std::optional<std::string> args = arguments_text(j.at(key), *span);
  if (!args) return std::nullopt;
  return ToolCall{name->get<std::string>(), std::move(*args)};
}

std::optional<ToolCall> call_from_object(std::string_view raw) {
  nlohmann::json j;
  if (parse_json_bounded(raw, kMaxDepth, &j)) return std::nullopt;
  return call_from_parsed(j, raw);
}

// A non-empty array of call objects.
std::optional<std::vector<ToolCall>> calls_from_array(std::string_view raw) {
  nlohmann::json j;
  if (parse_json_bounded(raw, kMaxDepth, &j) || !j.is_array() || j.empty()) return std::nullopt;
  const std::vector<std::string_view> elements = array_elements(raw);
  if (elements.size() != j.size()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (size_t i = 0; i < elements.size(); ++i) {
    std::optional<ToolCall> call = call_from_parsed(j[i], elements[i]);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

std::optional<std::string> arguments_object(std::string_view raw) {
  nlohmann::json j;
  if (parse_json_bounded(raw, kMaxDepth, &j) || !j.is_object()) return std::nullopt;
  return compact_json(raw);
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kNone:
      return "none";
    case ToolCallFormat::kJson:
      return "json";
    case ToolCallFormat::kHermes:
      return "hermes";
    case ToolCallFormat::kMistral:
      return "mistral";
    case ToolCallFormat::kArguments:
      return "arguments";
    case ToolCallFormat::kCallList:
      return "call_list";
  }
  return "none";
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  const auto has = [&](std::string_view s) { return src.find(s) != std::string_view::npos; };
  if (has(kToolCallOpen)) return ToolCallFormat::kHermes;
  if (has(kToolCallsMarker)) return ToolCallFormat::kMistral;
  if (has(kPythonTag) || (has("ipython") && has("parameters"))) return ToolCallFormat::kJson;
  if (has("tools")) return ToolCallFormat::kJson;
  return ToolCallFormat::kNone;
}

ToolCallOutput parse_tool_calls(ToolCallFormat f, std::string_view text, std::string_view forced_name) {
  if (f == ToolCallFormat::kNone) return ToolCallOutput{std::string(text), {}};
  ToolCallStream stream(f, std::string(forced_name));
  ToolCallStream::Delta a = stream.feed(text);
  ToolCallStream::Delta b = stream.finish();
  ToolCallOutput out{std::move(a.content), std::move(a.calls)};
  out.content += b.content;
  for (ToolCall& c : b.calls) out.calls.push_back(std::move(c));
  return out;
}

ToolCallStream::ToolCallStream(ToolCallFormat f, std::string forced_name)
    : format_(f), forced_name_(std::move(forced_name)), state_(State::kStart) {}

ToolCallStream::Delta ToolCallStream::feed(std::string_view piece) {
  if (finished_) return {};
  if (format_ == ToolCallFormat::kNone) return Delta{std::string(piece), {}};
  try {
    for (char c : piece) step(c);
  } catch (const std::exception&) {  // out of memory: the text is content from here on
    state_ = State::kRaw;
    pending_.clear();
    held_.clear();
  }
  return std::exchange(out_, Delta{});
}

ToolCallStream::Delta ToolCallStream::finish() {
  if (finished_) return {};
  finished_ = true;
  if (format_ == ToolCallFormat::kNone) return {};
  if (state_ == State::kBetween) {
    // The calls stand: only whitespace, ";" and markers are held besides them.
    for (ToolCall& c : pending_) out_.calls.push_back(std::move(c));
  } else {
    // An unclosed or unfinished call (or a marker prefix): its text is content.
    emit_content(held_);
  }
  pending_.clear();
  held_.clear();
  ws_held_.clear();  // trailing whitespace
  return std::exchange(out_, Delta{});
}

// Content through the trimmer: leading whitespace is dropped, a run of whitespace is held until content
// follows.
void ToolCallStream::emit_content_char(char c) {
  if (is_ws(c)) {
    if (content_started_) ws_held_.push_back(c);
    return;
  }
  content_started_ = true;
  out_.content += ws_held_;
  ws_held_.clear();
  out_.content.push_back(c);
}

void ToolCallStream::emit_content(std::string_view s) {
  for (char c : s) emit_content_char(c);
}

// The structure broke at the character just added to held_: everything held is content, and so is all that
// follows (every format's calls must precede the break).
void ToolCallStream::break_structure(char c) {
  held_.push_back(c);
  state_ = State::kRaw;
  pending_.clear();
  emit_content(held_);
  held_.clear();
}

// `c` == marker[0] starts a match. On a mismatch: kRelease (the marker was looked for inside content) emits
// the first held byte and re-reads the rest as content, which may start the marker again; kRawRelease (a
// marker that could only open the output) makes everything content; kBreak (the marker was part of a call's
// structure) breaks the structure.
void ToolCallStream::start_marker(const char* marker, char c, Miss miss, State after) {
  held_.push_back(c);
  marker_ = marker;
  mpos_ = 1;
  miss_ = miss;
  after_marker_ = after;
  state_ = State::kMarker;
}

void ToolCallStream::start_json(char open, Unit unit) {
  json_start_ = held_.size();
  held_.push_back(open);
  depth_ = 1;
  strings_ = JsonStringState();
  expect_first_ = true;
  unit_ = unit;
  state_ = State::kJson;
}

// One character of a call's JSON: string and depth state, so the span is parsed once, when it closes.
void ToolCallStream::json_char(char c) {
  held_.push_back(c);
  if (strings_.in_string) {
    strings_.step(c);
    return;
  }
  if (expect_first_) {
    if (is_ws(c)) return;
    expect_first_ = false;
    // A call array opens with an object, a call object with a key; arguments may be {} too. Anything else is
    // no call, and is released now rather than when (if ever) its brackets close.
    const bool ok =
        unit_ == Unit::kCallArray ? c == '{' : (c == '"' || (unit_ == Unit::kArguments && c == '}'));
    if (!ok) {
      held_.pop_back();
      break_structure(c);
      return;
    }
  }
  if (strings_.step(c)) return;  // a string opens
  switch (c) {
    case '{':
    case '[':
      if (++depth_ > kMaxDepth) {
        held_.pop_back();
        break_structure(c);
      }
      break;
    case '}':
    case ']':
      if (--depth_ == 0) json_closed();
      break;
    default:
      break;
  }
}

void ToolCallStream::json_closed() {
  const std::string_view span = std::string_view(held_).substr(json_start_);
  bool ok = false;
  if (unit_ == Unit::kCallObject) {
    if (std::optional<ToolCall> call = call_from_object(span)) {
      pending_.push_back(std::move(*call));
      ok = true;
    }
  } else if (unit_ == Unit::kCallArray) {
    if (std::optional<std::vector<ToolCall>> calls = calls_from_array(span)) {
      for (ToolCall& call : *calls) pending_.push_back(std::move(call));
      ok = true;
    }
  } else {
    const std::string& name = format_ == ToolCallFormat::kArguments ? forced_name_ : mistral_name_;
    std::optional<std::string> args = arguments_object(span);
    if (args && !name.empty()) {
      pending_.push_back(ToolCall{name, std::move(*args)});
      ok = true;
    }
  }
  if (!ok) {
    const char last = held_.back();
    held_.pop_back();
    break_structure(last);
    return;
  }
  state_ = format_ == ToolCallFormat::kHermes ? State::kAfterJson : State::kBetween;
}

void ToolCallStream::step(char c) {
  switch (state_) {
    case State::kRaw:
      emit_content_char(c);
      return;

    case State::kStart:
      if (is_ws(c)) {
        emit_content_char(c);  // leading whitespace: trimmed whatever follows
        return;
      }
      switch (format_) {
        case ToolCallFormat::kJson:
          if (c == '{') {
            start_json(c, Unit::kCallObject);
          } else if (c == kPythonTag[0]) {
            start_marker(kPythonTag, c, Miss::kRawRelease, State::kBeforeJson);
          } else {
            state_ = State::kRaw;
            emit_content_char(c);
          }
          return;
        case ToolCallFormat::kMistral:
          if (c == '[') {
            held_.push_back(c);
            state_ = State::kMistralOpen;
          } else {
            state_ = State::kContent;
            step(c);
          }
          return;
        case ToolCallFormat::kArguments:
        case ToolCallFormat::kCallList: {
          const bool args = format_ == ToolCallFormat::kArguments;
          if (c == (args ? '{' : '[')) {
            start_json(c, args ? Unit::kArguments : Unit::kCallArray);
          } else {
            state_ = State::kRaw;
            emit_content_char(c);
          }
          return;
        }
        default:  // kHermes (kNone never gets here)
          state_ = State::kContent;
          step(c);
          return;
      }

    case State::kContent:
      if (format_ == ToolCallFormat::kHermes && c == kToolCallOpen[0]) {
        start_marker(kToolCallOpen, c, Miss::kRelease, State::kBeforeJson);
      } else if (format_ == ToolCallFormat::kMistral && c == kToolCallsMarker[0]) {
        start_marker(kToolCallsMarker, c, Miss::kRelease, State::kMistralHead);
      } else {
        emit_content_char(c);
      }
      return;

    case State::kMarker:
      if (c == marker_[mpos_]) {
        held_.push_back(c);
        if (marker_[++mpos_] != '\0') return;
        state_ = after_marker_;
        if (marker_ == kToolCallClose) {  // a hermes block is complete: its call is final
          for (ToolCall& call : pending_) out_.calls.push_back(std::move(call));
          pending_.clear();
          held_.clear();
        }
        return;
      }
      switch (miss_) {
        case Miss::kBreak:
          break_structure(c);
          return;
        case Miss::kRawRelease:
          state_ = State::kRaw;
          emit_content(held_);
          held_.clear();
          emit_content_char(c);
          return;
        case Miss::kRelease: {
          // held_ is just the marker prefix (content holds nothing else).
          std::string redo = held_.substr(1);
          redo.push_back(c);
          const char first = held_[0];
          held_.clear();
          state_ = State::kContent;
          emit_content_char(first);
          for (char d : redo) step(d);
          return;
        }
      }
      return;

    case State::kMistralOpen: {
      // held_ ends with "[": "[TOOL_CALLS]" or a bare call array. At the start of the output (held_ is just
      // the
      // "[") anything else is content that may still hold "[TOOL_CALLS]" later; after a call it breaks the
      // list.
      const bool at_start = held_.size() == 1;
      if (c == kToolCallsMarker[1]) {
        held_.push_back(c);
        marker_ = kToolCallsMarker;
        mpos_ = 2;
        miss_ = at_start ? Miss::kRelease : Miss::kBreak;
        after_marker_ = State::kMistralHead;
        state_ = State::kMarker;
      } else if (c == '{' || is_ws(c)) {
        held_.pop_back();
        start_json('[', Unit::kCallArray);
        json_char(c);
      } else if (at_start) {
        held_.clear();
        state_ = State::kContent;
        emit_content_char('[');
        step(c);
      } else {
        break_structure(c);
      }
      return;
    }

    case State::kMistralHead:
      if (is_ws(c)) {
        held_.push_back(c);
      } else if (c == '[') {
        start_json(c, Unit::kCallArray);
      } else if (is_name_char(c)) {
        held_.push_back(c);
        mistral_name_.assign(1, c);
        state_ = State::kMistralName;
      } else {
        break_structure(c);
      }
      return;

    case State::kMistralName:
      if (is_name_char(c) && mistral_name_.size() < kMaxMistralName) {
        held_.push_back(c);
        mistral_name_.push_back(c);
      } else if (c == kArgsMarker[0]) {
        start_marker(kArgsMarker, c, Miss::kBreak, State::kBeforeJson);
      } else {
        break_structure(c);
      }
      return;

    case State::kBeforeJson:
      if (is_ws(c)) {
        held_.push_back(c);
      } else if (c == '{') {
        start_json(c, format_ == ToolCallFormat::kMistral ? Unit::kArguments : Unit::kCallObject);
      } else {
        break_structure(c);
      }
      return;

    case State::kJson:
      json_char(c);
      return;

    case State::kAfterJson:  // hermes
      if (is_ws(c)) {
        held_.push_back(c);
      } else if (c == kToolCallClose[0]) {
        start_marker(kToolCallClose, c, Miss::kBreak, State::kContent);
      } else {
        break_structure(c);
      }
      return;

    case State::kBetween:
      if (is_ws(c)) {
        held_.push_back(c);
      } else if (format_ == ToolCallFormat::kJson && c == ';') {
        held_.push_back(c);
      } else if (format_ == ToolCallFormat::kJson && c == '{') {
        start_json(c, Unit::kCallObject);
      } else if (format_ == ToolCallFormat::kJson && c == kPythonTag[0]) {
        start_marker(kPythonTag, c, Miss::kBreak, State::kBeforeJson);
      } else if (format_ == ToolCallFormat::kMistral && c == '[') {
        held_.push_back(c);
        state_ = State::kMistralOpen;
      } else {
        break_structure(c);
      }
      return;
  }
}

}  // namespace frost
