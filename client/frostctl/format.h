#pragma once
// frostctl's pure helpers: text and number formatting, job-state names, the progress line of `jobs watch`,
// the inline JSONL reader of `train submit --inline-jsonl`, and the table printer. No I/O and no RPCs, so
// each is unit-tested on its own (format_test.cc).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "frost/v1/training.pb.h"

namespace frost::ctl {

// ---- Text

// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view s);

// Code points in `s`: the bytes that are not UTF-8 continuation bytes (10xxxxxx). For display widths; wide
// (CJK) and combining characters count as one column.
size_t utf8_length(std::string_view s);

// `s` when it has at most max_chars code points; otherwise its first max_chars - 1 code points, without
// trailing whitespace, followed by "…" (U+2026): at most max_chars code points in all. Never cuts inside a
// multi-byte sequence. max_chars 0 gives "".
std::string utf8_truncate(std::string_view s, size_t max_chars);

// `s` on one line: every ASCII control character (tabs and newlines included) becomes a space.
std::string one_line(std::string_view s);

// `s` without its trailing ASCII whitespace (spaces, tabs, CR, LF, VT, FF).
std::string trim_trailing_whitespace(std::string_view s);

// The lines of `content` (split on "\n", a trailing "\r" removed), leaving out empty lines: one text per
// line for `predict --file`.
std::vector<std::string> text_lines(std::string_view content);

// ---- Auth

// OK when `token` can be sent as "authorization: Bearer <token>": not empty, and only visible ASCII
// (0x21..0x7E). The error never quotes the token.
absl::Status check_bearer_token(std::string_view token);

// ---- Numbers and times

// "812 B", "1.5 KiB", "12.3 MiB", "1.0 GiB" (binary units, one decimal); negative values as plain numbers.
std::string format_bytes(int64_t bytes);

// "0s", "42s", "3m05s", "1h02m", "2d03h" (rounded to the unit shown); "-" when negative or not finite.
std::string format_duration(double seconds);

// Unix seconds as UTC "2024-05-01T12:34:56Z"; "-" for 0 (not yet), a negative or a non-finite value.
std::string format_unix_time(double unix_s);

// ---- Jobs

// A job state from the command line: "queued", "running", "succeeded", "failed", "cancelled" (or
// "canceled"), "interrupted", in any case, with or without the "JOB_STATE_" prefix. INVALID_ARGUMENT
// naming the value and the accepted names otherwise ("unspecified" included).
absl::StatusOr<frost::v1::JobState> parse_job_state(std::string_view name);

// "RUNNING" for JOB_STATE_RUNNING etc.; "STATE_<n>" for a number this client does not know.
std::string job_state_name(frost::v1::JobState state);

// SUCCEEDED, FAILED, CANCELLED and INTERRUPTED: the job will not change again.
bool is_terminal_state(frost::v1::JobState state);

// A progress bar of `width` columns in all, brackets included: "[#####.....]"; step is clamped to
// [0, total]. "" when total <= 0 or width < 3.
std::string render_bar(int64_t step, int64_t total, int width);

// The progress fields that are known, space-separated "key=value": stage, epoch, step (step/steps_total),
// loss (once step > 0), ex/s (when > 0), eta (when > 0). "" when the job reported no progress yet.
std::string progress_text(const frost::v1::JobProgress& progress);

// One line per WatchJob event when stdout is not a terminal: "<STATE> <progress_text>", then
// " artifact=<name>" once there is one. The reason is not part of it (`jobs watch` prints it on stderr).
std::string job_event_line(const frost::v1::Job& job);

// The live line `jobs watch` redraws on a terminal, at most max_columns code points:
// "RUNNING stage_b epoch 2 [######......] 120/400 30% loss 0.1234 512.3 ex/s ETA 1m20s". The bar (at most
// 30 columns) shrinks to fit; below 10 columns the ex/s, then the ETA, then the loss are left out to make
// room for it, and then the bar itself; what still does not fit is cut off with an ellipsis.
std::string render_progress_line(const frost::v1::Job& job, int max_columns);

// ---- train submit

// The label range --label-min / --label-max give.
struct LabelRange {
  double min = 0;
  double max = 1;
};

// Reads JSONL training rows, one JSON object per line: "text" (a string, not empty or whitespace-only),
// "label" (a finite number, inside `range` when given) and an optional "id" (kept when it is a string,
// like the server's reader does for train_path files); other fields are ignored. Whitespace-only lines
// are skipped (they still count for line numbers) and a trailing "\r" is ignored. The first bad line is
// INVALID_ARGUMENT "<source>:<line>: <what is wrong>"; a file without rows is "<source>: no rows".
absl::StatusOr<frost::v1::InlineRows> parse_inline_jsonl(std::string_view content, std::string_view source,
                                                         std::optional<LabelRange> range = std::nullopt);

// "key=value" (split at the first "="; the value may be empty, the key may not) for --set.
// INVALID_ARGUMENT `expected key=value, got "<arg>"` otherwise.
absl::StatusOr<std::pair<std::string, std::string>> parse_key_value(std::string_view arg);

// ---- Output

// A plain-text table: the header row, then one row per entry of `rows`; columns left-aligned, two spaces
// apart, each as wide as its widest cell (in code points); no trailing spaces; every row ends in "\n".
// Missing cells of a short row are empty.
std::string render_table(const std::vector<std::string>& headers,
                         const std::vector<std::vector<std::string>>& rows);

// `json` re-printed with a 2-space indent (no trailing newline); returned unchanged when it is not JSON.
std::string pretty_json(std::string_view json);

}  // namespace frost::ctl
