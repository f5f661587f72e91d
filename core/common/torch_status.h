#pragma once
// torch_call(fn): runs LibTorch code and converts exceptions into absl::Status exactly once,
// where a call leaves tensor code (docs/conventions.md, "Errors").
//   c10::OutOfMemoryError   → RESOURCE_EXHAUSTED
//   c10::NotImplementedError → UNIMPLEMENTED
//   any other c10::Error / std::exception → INTERNAL (request data is validated before
//   tensor code runs, so an escaping error is our bug).
#include <exception>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace frost {

// Maps the currently handled exception to a Status. Call only inside a catch block.
absl::Status status_from_current_exception();

template <typename Fn>
auto torch_call(Fn&& fn) -> std::conditional_t<std::is_void_v<std::invoke_result_t<Fn>>,
                                                absl::Status,
                                                absl::StatusOr<std::invoke_result_t<Fn>>> {
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn>>) {
      std::forward<Fn>(fn)();
      return absl::OkStatus();
    } else {
      return std::forward<Fn>(fn)();
    }
  } catch (...) {
    return status_from_current_exception();
  }
}

}  // namespace frost
