#include "core/common/torch_status.h"

#include <c10/util/Exception.h>

#include <new>
#include <string>

namespace frost {

absl::Status status_from_current_exception() {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(std::string("out of memory: ") + e.what_without_backtrace());
  } catch (const c10::NotImplementedError& e) {
    return absl::UnimplementedError(e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return absl::InternalError(e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory (std::bad_alloc)");
  } catch (const std::exception& e) {
    return absl::InternalError(e.what());
  } catch (...) {
    return absl::InternalError("unknown exception");
  }
}

}  // namespace frost
