// Bounded safetensors reader: every byte of an untrusted file is checked before a tensor view
// is handed out (see safetensors.h for the list of checks).
#include "core/store/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>
#include <ATen/core/grad_mode.h>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/torch_status.h"

namespace frost {
namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 64;  // a valid header nests 3 deep ({ name: { shape: [ ] } })

absl::Status invalid(const std::string& label, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(label, ": ", msg));
}

uint64_t read_le_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// "pickle (torch.save)" / "zip (TorchScript or torch.save)" when the leading bytes are one of
// the formats we refuse, else nullptr. `p` holds the first `n` bytes of a file of `file_size`
// bytes. A valid safetensors header could start with the same bytes (a header length of 0x0280
// + k·2^16 starts 80 02), so a file whose JSON header opens where its length says it does is
// not reported.
const char* sniff_unsupported(const uint8_t* p, size_t n, uint64_t file_size) {
  const char* kind = nullptr;
  if (n >= 2 && p[0] == 0x80 && p[1] >= 2 && p[1] <= 5) kind = "pickle (torch.save)";
  if (n >= 4 && p[0] == 'P' && p[1] == 'K' && p[2] == 3 && p[3] == 4) kind = "zip (TorchScript or torch.save)";
  if (kind == nullptr) return nullptr;
  if (n >= 9 && p[8] == '{' && read_le_u64(p) <= file_size - 8) return nullptr;
  return kind;
}

std::string shape_str(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

// Thrown only from inside the JSON parser callback and caught in parse_header().
struct HeaderReject {
  std::string msg;
};

// Parses the header JSON, rejecting duplicate keys at any level (nlohmann keeps the last one
// silently) and nesting deeper than kMaxJsonDepth. Never throws.
absl::Status parse_header(const char* begin, const char* end, const std::string& label, json* out) {
  std::vector<std::set<std::string>> keys;  // one set per open object
  int depth = 0;
  json::parser_callback_t cb = [&](int /*depth*/, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        [[fallthrough]];
      case json::parse_event_t::array_start:
        if (++depth > kMaxJsonDepth) {
          throw HeaderReject{absl::StrCat("header nests deeper than ", kMaxJsonDepth, " levels")};
        }
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        [[fallthrough]];
      case json::parse_event_t::array_end:
        --depth;
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(k).second) {
          throw HeaderReject{keys.size() == 1 ? absl::StrCat("duplicate tensor name '", k, "' in header")
                                              : absl::StrCat("duplicate key '", k, "' in header")};
        }
        break;
      }
      case json::parse_event_t::value:
        break;
    }
    return true;
  };
  try {
    *out = json::parse(begin, end, cb);
  } catch (const HeaderReject& r) {
    return invalid(label, r.msg);
  } catch (const json::exception& e) {
    return invalid(label, absl::StrCat("header is not valid JSON: ", e.what()));
  } catch (const std::exception& e) {  // std::bad_alloc and the like
    return invalid(label, absl::StrCat("cannot parse header: ", e.what()));
  }
  return absl::OkStatus();
}

// Reads a JSON value that must be a non-negative integer fitting in int64.
bool get_u63(const json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    const int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
  } else {
    return false;
  }
  return *out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

bool parse_dtype(const std::string& s, StDtype* out) {
  if (s == "F32") *out = StDtype::kF32;
  else if (s == "F16") *out = StDtype::kF16;
  else if (s == "BF16") *out = StDtype::kBF16;
  else if (s == "F64") *out = StDtype::kF64;
  else return false;
  return true;
}

}  // namespace

const char* st_dtype_name(StDtype d) {
  switch (d) {
    case StDtype::kF32: return "F32";
    case StDtype::kF16: return "F16";
    case StDtype::kBF16: return "BF16";
    case StDtype::kF64: return "F64";
  }
  return "?";
}

int64_t st_dtype_size(StDtype d) {
  switch (d) {
    case StDtype::kF32: return 4;
    case StDtype::kF16: return 2;
    case StDtype::kBF16: return 2;
    case StDtype::kF64: return 8;
  }
  return 0;
}

int64_t StTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;  // bounded by the parser (numel * dtype size <= file size)
  return n;
}

SafetensorsFile::~SafetensorsFile() {
  if (mmap_base_ != nullptr) munmap(mmap_base_, size_);
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path,
                                                                       const SafetensorsLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);  // a FIFO: no wait
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(path, ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid(path, "not a regular file");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ > 0) {
    void* base = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return absl::Status(absl::ErrnoToStatusCode(err), absl::StrCat(path, ": mmap failed: ", std::strerror(err)));
    }
    f->mmap_base_ = base;
    f->data_ = static_cast<const uint8_t*>(base);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  if (absl::Status s = f->parse(limits); !s.ok()) return s;
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_bytes(std::string bytes,
                                                                             const std::string& label,
                                                                             const SafetensorsLimits& limits) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = label;
  f->owned_ = std::move(bytes);
  f->data_ = reinterpret_cast<const uint8_t*>(f->owned_.data());
  f->size_ = f->owned_.size();
  if (absl::Status s = f->parse(limits); !s.ok()) return s;
  return f;
}

absl::Status SafetensorsFile::parse(const SafetensorsLimits& limits) {
  const std::string& label = path_;
  if (size_ == 0) return invalid(label, "empty file (expected an 8-byte header length)");
  if (const char* kind = sniff_unsupported(data_, static_cast<size_t>(std::min<uint64_t>(size_, 9)), size_)) {
    return invalid(label, absl::StrCat("unsupported format: use safetensors (file looks like ", kind, ")"));
  }
  if (size_ < 8) {
    return invalid(label, absl::StrCat("file is ", size_, " bytes, shorter than the 8-byte header length"));
  }
  const uint64_t header_len = read_le_u64(data_);
  if (header_len > limits.max_header_bytes) {
    return invalid(label, absl::StrCat("header length ", header_len, " exceeds the limit of ", limits.max_header_bytes,
                                       " bytes"));
  }
  if (header_len > size_ - 8) {
    return invalid(label, absl::StrCat("header length ", header_len, " extends past the end of the file (",
                                       size_, " bytes)"));
  }
  data_start_ = 8 + header_len;
  const uint64_t data_size = size_ - data_start_;

  json header;
  const char* h = reinterpret_cast<const char*>(data_ + 8);
  if (absl::Status s = parse_header(h, h + header_len, label, &header); !s.ok()) return s;
  if (!header.is_object()) {
    return invalid(label, absl::StrCat("header is a JSON ", header.type_name(), ", expected an object"));
  }

  std::vector<StTensorInfo> tensors;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return invalid(label, "__metadata__ must be an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) {
          return invalid(label,
                         absl::StrCat("__metadata__ value for key '", k, "' must be a string, got ", v.type_name()));
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (static_cast<int64_t>(tensors.size()) >= limits.max_tensors) {
      return invalid(label, absl::StrCat("more than ", limits.max_tensors, " tensors"));
    }
    const std::string where = absl::StrCat("tensor '", name, "'");
    if (!entry.is_object()) {
      return invalid(label, absl::StrCat(where, ": entry must be an object, got ", entry.type_name()));
    }

    StTensorInfo info;
    info.name = name;

    // dtype
    auto it = entry.find("dtype");
    if (it == entry.end() || !it->is_string()) {
      return invalid(label, absl::StrCat(where, ": missing string field 'dtype'"));
    }
    const std::string& dtype = it->get_ref<const std::string&>();
    if (!parse_dtype(dtype, &info.dtype)) {
      return invalid(label,
                     absl::StrCat("unsupported dtype '", dtype, "' for ", where, " (supported: F32, F16, BF16, F64)"));
    }

    // shape
    it = entry.find("shape");
    if (it == entry.end() || !it->is_array()) {
      return invalid(label, absl::StrCat(where, ": missing array field 'shape'"));
    }
    if (it->size() > static_cast<size_t>(limits.max_rank)) {
      return invalid(label, absl::StrCat(where, ": rank ", it->size(), " exceeds the limit of ", limits.max_rank));
    }
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *it) {
      uint64_t v = 0;
      if (!get_u63(d, &v)) {
        return invalid(label, absl::StrCat(where, ": shape ", it->dump(), " must hold non-negative integers"));
      }
      info.shape.push_back(static_cast<int64_t>(v));
      if (__builtin_mul_overflow(numel, v, &numel)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(st_dtype_size(info.dtype)), &nbytes) ||
        nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return invalid(label, absl::StrCat(where, ": shape ", shape_str(info.shape), " overflows the element count"));
    }

    // data_offsets
    it = entry.find("data_offsets");
    if (it == entry.end() || !it->is_array() || it->size() != 2) {
      return invalid(label, absl::StrCat(where, ": 'data_offsets' must be an array [begin, end]"));
    }
    if (!get_u63((*it)[0], &info.begin) || !get_u63((*it)[1], &info.end)) {
      return invalid(label, absl::StrCat(where, ": data_offsets ", it->dump(), " must be non-negative integers"));
    }
    if (info.begin > info.end) {
      return invalid(label, absl::StrCat(where, ": data_offsets [", info.begin, ", ", info.end, "] has begin > end"));
    }
    if (info.end > data_size) {
      return invalid(label, absl::StrCat(where, ": data_offsets [", info.begin, ", ", info.end,
                                         "] extend past the data section (", data_size, " bytes)"));
    }
    if (nbytes != info.end - info.begin) {
      return invalid(label, absl::StrCat(where, ": shape ", shape_str(info.shape), " of ", dtype, " needs ", nbytes,
                                         " bytes but data_offsets [", info.begin, ", ", info.end, "] span ",
                                         info.end - info.begin));
    }
    tensors.push_back(std::move(info));
  }

  // The tensors must tile the data section: sorted by offset, each starts where the previous
  // ended, and the last ends at the end of the file.
  std::sort(tensors.begin(), tensors.end(), [](const StTensorInfo& a, const StTensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expect = 0;
  const StTensorInfo* prev = nullptr;
  for (const StTensorInfo& t : tensors) {
    if (t.begin < expect) {
      return invalid(label, absl::StrCat("tensor '", t.name, "' data_offsets [", t.begin, ", ", t.end,
                                         "] overlap tensor '", prev->name, "' [", prev->begin, ", ", prev->end, "]"));
    }
    if (t.begin > expect) {
      return invalid(label, absl::StrCat("gap of ", t.begin - expect, " unused bytes before tensor '", t.name,
                                         "' (data_offsets [", t.begin, ", ", t.end, "], expected begin ", expect, ")"));
    }
    expect = t.end;
    prev = &t;
  }
  if (expect != data_size) {
    return invalid(label, absl::StrCat(data_size - expect, " trailing bytes after the last tensor (data section is ",
                                       data_size, " bytes, tensors cover ", expect, ")"));
  }

  tensors_ = std::move(tensors);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  return absl::OkStatus();
}

const StTensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

at::Tensor SafetensorsFile::view(const StTensorInfo& info) const {
  const at::ScalarType st = info.dtype == StDtype::kF32   ? at::kFloat
                            : info.dtype == StDtype::kF16 ? at::kHalf
                            : info.dtype == StDtype::kF64 ? at::kDouble
                                                          : at::kBFloat16;
  const at::TensorOptions opts = at::TensorOptions().dtype(st).device(at::kCPU);
  const uint8_t* p = data_ + data_start_ + info.begin;
  if (reinterpret_cast<uintptr_t>(p) % static_cast<uintptr_t>(st_dtype_size(info.dtype)) != 0) {
    // The format does not promise aligned data (a header length that is not a multiple of 8
    // is legal). Typed loads from a misaligned address are undefined behaviour, so such a
    // tensor is copied into fresh, aligned storage instead of viewed.
    at::Tensor t = at::empty(info.shape, opts);
    if (t.numel() > 0) std::memcpy(t.data_ptr(), p, static_cast<size_t>(info.end - info.begin));
    return t;
  }
  // The mapping is read-only (PROT_READ): the view must not be written to.
  return at::from_blob(const_cast<uint8_t*>(p), info.shape, opts);
}

absl::Status check_not_pickle(const std::string& path) {
  std::string ext;
  if (const size_t slash = path.find_last_of('/'), dot = path.find_last_of('.');
      dot != std::string::npos && (slash == std::string::npos || dot > slash)) {
    ext = absl::AsciiStrToLower(path.substr(dot));
  }
  static const char* const kRefused[] = {".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle"};
  for (const char* r : kRefused) {
    if (ext == r) return absl::InvalidArgumentError(absl::StrCat("unsupported format: use safetensors (", path, ")"));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);  // a FIFO: no wait
  if (fd < 0) return absl::OkStatus();  // nothing to sniff; opening it for real reports the error
  uint8_t head[9] = {};
  size_t n = 0;
  while (n < sizeof(head)) {
    const ssize_t r = ::read(fd, head + n, sizeof(head) - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  struct stat st {};
  const uint64_t size = fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : n;
  ::close(fd);
  if (const char* kind = sniff_unsupported(head, n, size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unsupported format: use safetensors (", path, " looks like ", kind, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> safetensors_serialize(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                                                  const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& [name, t0] : tensors) {
    if (name == "__metadata__" || header.contains(name))
      return absl::InvalidArgumentError(absl::StrCat("safetensors: duplicate or reserved tensor name '", name, "'"));
    at::Tensor t = t0.detach().contiguous().cpu();
    const char* dt = t.scalar_type() == at::kFloat      ? "F32"
                     : t.scalar_type() == at::kHalf     ? "F16"
                     : t.scalar_type() == at::kBFloat16 ? "BF16"
                     : t.scalar_type() == at::kDouble   ? "F64"
                                                        : nullptr;
    if (!dt)
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor '", name, "' has unsupported dtype ",
                                                     c10::toString(t.scalar_type())));
    const size_t begin = data.size();
    const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
    data.append(static_cast<const char*>(t.data_ptr()), nbytes);
    header[name] = {{"dtype", dt}, {"shape", t.sizes().vec()}, {"data_offsets", {begin, begin + nbytes}}};
  }
  std::string h = header.dump();
  while (h.size() % 8) h.push_back(' ');
  std::string out(8, '\0');
  const uint64_t n = h.size();
  std::memcpy(out.data(), &n, 8);
  out += h;
  out += data;
  return out;
}

absl::Status safetensors_load_into(const SafetensorsFile& f,
                                   const std::vector<std::pair<std::string, at::Tensor>>& named) {
  auto bad = [](const std::string& what) { return absl::InvalidArgumentError(what); };
  std::set<std::string> expected;
  for (const auto& [n, named_t] : named) {
    const at::Tensor& t = named_t;  // captured below: C++17 lambdas cannot capture a structured binding
    expected.insert(n);
    const StTensorInfo* info = f.find(n);
    if (!info) return bad(absl::StrCat("tensor ", n, " missing"));
    at::Tensor src = f.view(*info);
    if (src.sizes() != t.sizes())
      return bad(absl::StrCat("tensor ", n, " has shape ", c10::str(src.sizes()), ", expected ", c10::str(t.sizes())));
    absl::StatusOr<bool> finite = torch_call([&] {
      at::NoGradGuard ng;
      at::Tensor fsrc = src.to(at::kFloat);
      if (!at::isfinite(fsrc).all().item<bool>()) return false;
      at::Tensor dst = t;
      dst.copy_(fsrc);
      return true;
    });
    if (!finite.ok()) return finite.status();
    if (!*finite) return bad(absl::StrCat("tensor ", n, " has non-finite values"));
  }
  for (const StTensorInfo& info : f.tensors())
    if (!expected.count(info.name)) return bad(absl::StrCat("unexpected tensor ", info.name));
  return absl::OkStatus();
}

}  // namespace frost
