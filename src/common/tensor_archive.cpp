#include "lockstep/common/tensor_archive.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <map>
#include <variant>

#include "lockstep/common/error.h"

// Tensor bytes are copied as they lie in memory and the format is little endian.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "TensorArchive assumes a little-endian host"
#endif

namespace lockstep {

namespace {

constexpr char kArchiveMagic[16] = {'L', 'O', 'C', 'K', 'S', 'T', 'E', 'P', '-', 'T', 'E', 'N', 'S', 'O', 'R', 'S'};
constexpr uint32_t kVersion = 1;
constexpr size_t kMaxKeyBytes = 4096;
constexpr int kMaxDims = 32;
constexpr uint64_t kMaxDimSize = uint64_t{1} << 48;
// The smallest entry: a 1-byte key, its kind and a bool.
constexpr size_t kMinEntryBytes = 4 + 1 + 1 + 1;

}  // namespace

// Named, not anonymous: TensorArchive::Impl holds them, and a class with external linkage must
// not have a member of an internal type.
namespace archive_detail {

/// A tensor produced when the archive is written (putTensorSource).
struct TensorSource {
  at::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::function<at::Tensor()> produce;
};

using Value = std::variant<at::Tensor, int64_t, double, bool, std::string, TensorSource>;

}  // namespace archive_detail

using archive_detail::TensorSource;
using archive_detail::Value;

namespace {

TensorArchive::Kind kindOf(const Value& v) {
  switch (v.index()) {
    case 0:
    case 5: return TensorArchive::Kind::kTensor;
    case 1: return TensorArchive::Kind::kInt;
    case 2: return TensorArchive::Kind::kDouble;
    case 3: return TensorArchive::Kind::kBool;
    default: return TensorArchive::Kind::kString;
  }
}

int64_t numelOf(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

// lockstep's own dtype codes: fixed forever, independent of LibTorch's enum.
struct DtypeCode {
  uint8_t code;
  at::ScalarType type;
};
constexpr DtypeCode kDtypes[] = {
    {1, at::kFloat}, {2, at::kDouble}, {3, at::kHalf}, {4, at::kBFloat16}, {5, at::kByte},
    {6, at::kChar},  {7, at::kShort},  {8, at::kInt},  {9, at::kLong},     {10, at::kBool},
};

const DtypeCode* byType(at::ScalarType type) {
  for (const auto& d : kDtypes) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

const DtypeCode* byCode(uint8_t code) {
  for (const auto& d : kDtypes) {
    if (d.code == code) return &d;
  }
  return nullptr;
}

void appendU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
void appendU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
void appendU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

/// Reads the archive's bytes front to back; every read is checked against what remains.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& label) : bytes_(bytes), label_(label) {}

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    std::string entry = key_.empty() ? "" : fmt::format(", in entry '{}'", key_);
    throw CheckpointError(
        fmt::format("{}: malformed tensor archive at byte {} of {}{}: {}", label_, at, bytes_.size(), entry, what));
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }
  void setKey(std::string key) { key_ = std::move(key); }

  std::string_view take(uint64_t n, const char* what) {
    if (n > remaining()) { fail(pos_, fmt::format("{} needs {} bytes but only {} remain", what, n, remaining())); }
    std::string_view out = bytes_.substr(pos_, static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return out;
  }
  uint8_t u8(const char* what) { return static_cast<uint8_t>(take(1, what)[0]); }
  uint32_t u32(const char* what) {
    std::string_view b = take(4, what);
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    return v;
  }
  uint64_t u64(const char* what) {
    std::string_view b = take(8, what);
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i])) << (8 * i);
    return v;
  }

 private:
  std::string_view bytes_;
  const std::string& label_;
  size_t pos_ = 0;
  std::string key_;
};

at::Tensor readTensor(Reader& r) {
  size_t start = r.pos();
  uint8_t code = r.u8("the dtype code");
  const DtypeCode* dtype = byCode(code);
  if (!dtype) r.fail(start, fmt::format("unknown dtype code {}", code));
  size_t ndimAt = r.pos();
  uint8_t ndim = r.u8("the number of dimensions");
  if (ndim > kMaxDims) r.fail(ndimAt, fmt::format("{} dimensions (at most {} are allowed)", ndim, kMaxDims));
  std::vector<int64_t> sizes(ndim);
  uint64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    size_t at = r.pos();
    uint64_t size = r.u64("a dimension's size");
    if (size > kMaxDimSize) r.fail(at, fmt::format("dimension {} has size {} (at most 2^48)", d, size));
    if (__builtin_mul_overflow(numel, size, &numel)) r.fail(at, "the shape's element count overflows");
    sizes[d] = static_cast<int64_t>(size);
  }
  const uint64_t elementSize = c10::elementSize(dtype->type);
  uint64_t expected = 0;
  size_t countAt = r.pos();
  if (__builtin_mul_overflow(numel, elementSize, &expected)) r.fail(countAt, "the tensor's byte count overflows");
  uint64_t byteCount = r.u64("the tensor's byte count");
  if (byteCount != expected) {
    r.fail(countAt, fmt::format("the tensor's byte count is {} but a {} tensor of {} elements takes {}", byteCount,
                                c10::toString(dtype->type), numel, expected));
  }
  size_t dataAt = r.pos();
  std::string_view data = r.take(byteCount, "the tensor's data");
  if (dtype->type == at::kBool) {
    for (size_t i = 0; i < data.size(); ++i) {
      if (static_cast<uint8_t>(data[i]) > 1) r.fail(dataAt + i, "a bool tensor holds a byte other than 0 or 1");
    }
  }
  at::Tensor t = at::empty(sizes, at::TensorOptions().dtype(dtype->type));
  if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size());
  return t;
}

std::string withArticle(TensorArchive::Kind kind) {
  return (kind == TensorArchive::Kind::kInt ? "an " : "a ") + std::string(toString(kind));
}

}  // namespace

ObsoleteCheckpointError ObsoleteCheckpointError::about(const std::string& path) {
  return ObsoleteCheckpointError(fmt::format(
      "{} was written by an older lockstep (torch archive format); it cannot be loaded safely — retrain or convert",
      path));
}

const char* toString(TensorArchive::Kind kind) {
  switch (kind) {
    case TensorArchive::Kind::kTensor: return "tensor";
    case TensorArchive::Kind::kInt: return "int64";
    case TensorArchive::Kind::kDouble: return "double";
    case TensorArchive::Kind::kBool: return "bool";
    case TensorArchive::Kind::kString: return "string";
  }
  return "unknown";
}

struct TensorArchive::Impl {
  std::string label;
  std::map<std::string, Value> entries;

  void checkKey(const std::string& key) const {
    LOCKSTEP_CHECK(!key.empty() && key.size() <= kMaxKeyBytes, "tensor archive keys must have 1 to ", kMaxKeyBytes,
                   " bytes; got one of ", key.size());
  }
  const Value& get(const std::string& key, Kind want) const {
    auto it = entries.find(key);
    if (it == entries.end()) throw CheckpointError(fmt::format("{} has no entry '{}'", label, key));
    if (kindOf(it->second) != want) {
      throw CheckpointError(fmt::format("entry '{}' of {} is {}, expected {}", key, label,
                                        withArticle(kindOf(it->second)), withArticle(want)));
    }
    return it->second;
  }
};

TensorArchive::TensorArchive(std::string label) : impl_(std::make_unique<Impl>()) { impl_->label = std::move(label); }
TensorArchive::~TensorArchive() = default;
TensorArchive::TensorArchive(TensorArchive&&) noexcept = default;
TensorArchive& TensorArchive::operator=(TensorArchive&&) noexcept = default;

void TensorArchive::putTensor(const std::string& key, const at::Tensor& value) {
  impl_->checkKey(key);
  LOCKSTEP_CHECK(value.defined(), "tensor archive entry '", key, "': the tensor is undefined");
  LOCKSTEP_CHECK(value.layout() == at::kStrided && !value.is_quantized(), "tensor archive entry '", key,
                 "': only dense tensors can be stored, got layout ", value.layout());
  LOCKSTEP_CHECK(byType(value.scalar_type()) != nullptr, "tensor archive entry '", key, "': dtype ",
                 value.scalar_type(), " is not supported");
  impl_->entries[key] = value;
}
void TensorArchive::putTensorSource(const std::string& key, at::ScalarType dtype, std::vector<int64_t> sizes,
                                    std::function<at::Tensor()> produce) {
  impl_->checkKey(key);
  LOCKSTEP_CHECK(produce != nullptr, "tensor archive entry '", key, "': no producer");
  LOCKSTEP_CHECK(byType(dtype) != nullptr, "tensor archive entry '", key, "': dtype ", dtype, " is not supported");
  for (int64_t s : sizes) LOCKSTEP_CHECK(s >= 0, "tensor archive entry '", key, "': negative size ", s);
  impl_->entries[key] = TensorSource{dtype, std::move(sizes), std::move(produce)};
}
void TensorArchive::putInt(const std::string& key, int64_t value) {
  impl_->checkKey(key);
  impl_->entries[key] = value;
}
void TensorArchive::putDouble(const std::string& key, double value) {
  impl_->checkKey(key);
  impl_->entries[key] = value;
}
void TensorArchive::putBool(const std::string& key, bool value) {
  impl_->checkKey(key);
  impl_->entries[key] = value;
}
void TensorArchive::putString(const std::string& key, std::string value) {
  impl_->checkKey(key);
  impl_->entries[key] = std::move(value);
}

bool TensorArchive::contains(const std::string& key) const { return impl_->entries.count(key) != 0; }

TensorArchive::Kind TensorArchive::kind(const std::string& key) const {
  auto it = impl_->entries.find(key);
  if (it == impl_->entries.end()) throw CheckpointError(fmt::format("{} has no entry '{}'", impl_->label, key));
  return kindOf(it->second);
}

at::Tensor TensorArchive::getTensor(const std::string& key) const {
  const Value& value = impl_->get(key, Kind::kTensor);
  LOCKSTEP_CHECK(std::holds_alternative<at::Tensor>(value), "tensor archive entry '", key, "' of ", impl_->label,
                 " is produced only when the archive is written");
  return std::get<at::Tensor>(value);
}
int64_t TensorArchive::getInt(const std::string& key) const { return std::get<int64_t>(impl_->get(key, Kind::kInt)); }
double TensorArchive::getDouble(const std::string& key) const {
  return std::get<double>(impl_->get(key, Kind::kDouble));
}
bool TensorArchive::getBool(const std::string& key) const { return std::get<bool>(impl_->get(key, Kind::kBool)); }
const std::string& TensorArchive::getString(const std::string& key) const {
  return std::get<std::string>(impl_->get(key, Kind::kString));
}

std::vector<std::string> TensorArchive::keys(std::string_view prefix) const {
  std::vector<std::string> out;
  for (auto it = impl_->entries.lower_bound(std::string(prefix));
       it != impl_->entries.end() && std::string_view(it->first).substr(0, prefix.size()) == prefix; ++it) {
    out.push_back(it->first);
  }
  return out;
}

size_t TensorArchive::size() const { return impl_->entries.size(); }
const std::string& TensorArchive::label() const { return impl_->label; }

size_t TensorArchive::serializedSize() const {
  size_t total = sizeof(kArchiveMagic) + 4 + 4 + 8;
  for (const auto& [key, value] : impl_->entries) {
    total += 4 + key.size() + 1;
    if (const auto* t = std::get_if<at::Tensor>(&value)) {
      total += 2 + 8 * static_cast<size_t>(t->dim()) + 8 + t->nbytes();
    } else if (const auto* source = std::get_if<TensorSource>(&value)) {
      total += 2 + 8 * source->sizes.size() + 8 +
               static_cast<size_t>(numelOf(source->sizes)) * c10::elementSize(source->dtype);
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      total += 8 + s->size();
    } else if (std::holds_alternative<bool>(value)) {
      total += 1;
    } else {
      total += 8;
    }
  }
  return total;
}

void TensorArchive::writeTo(const std::function<void(std::string_view)>& sink) const {
  std::string head;  // the bytes before the next tensor's data
  head.append(kArchiveMagic, sizeof(kArchiveMagic));
  appendU32(head, kVersion);
  appendU32(head, 0);
  appendU64(head, impl_->entries.size());
  for (const auto& [key, value] : impl_->entries) {
    appendU32(head, static_cast<uint32_t>(key.size()));
    head += key;
    appendU8(head, static_cast<uint8_t>(kindOf(value)));
    switch (kindOf(value)) {
      case Kind::kTensor: {
        at::Tensor given;
        if (const auto* source = std::get_if<TensorSource>(&value)) {
          given = source->produce();
          LOCKSTEP_CHECK(given.defined() && given.scalar_type() == source->dtype && given.sizes().equals(source->sizes),
                         "tensor archive entry '", key, "': its producer returned a tensor other than the ",
                         source->dtype, " ", at::IntArrayRef(source->sizes), " announced");
        } else {
          given = std::get<at::Tensor>(value);
        }
        const at::Tensor t = (given.is_cpu() ? given : given.cpu()).contiguous();  // a copy only where needed
        appendU8(head, byType(t.scalar_type())->code);
        appendU8(head, static_cast<uint8_t>(t.dim()));
        for (int64_t size : t.sizes()) appendU64(head, static_cast<uint64_t>(size));
        appendU64(head, t.nbytes());
        sink(head);
        head.clear();
        if (t.nbytes() > 0) sink(std::string_view(static_cast<const char*>(t.data_ptr()), t.nbytes()));
        break;
      }
      case Kind::kInt: appendU64(head, static_cast<uint64_t>(std::get<int64_t>(value))); break;
      case Kind::kDouble: {
        uint64_t bits = 0;
        double d = std::get<double>(value);
        std::memcpy(&bits, &d, sizeof(bits));
        appendU64(head, bits);
        break;
      }
      case Kind::kBool: appendU8(head, std::get<bool>(value) ? 1 : 0); break;
      case Kind::kString: {
        const std::string& s = std::get<std::string>(value);
        appendU64(head, s.size());
        head += s;
        break;
      }
    }
  }
  if (!head.empty()) sink(head);
}

std::string TensorArchive::serialize() const {
  std::string out;
  const size_t total = serializedSize();
  out.reserve(total);
  writeTo([&out](std::string_view piece) { out.append(piece); });
  LOCKSTEP_ASSERT(out.size() == total, "tensor archive size estimate ", total, " != ", out.size());
  return out;
}

TensorArchive TensorArchive::parse(std::string_view bytes, std::string label) {
  TensorArchive archive(std::move(label));
  const std::string& name = archive.impl_->label;
  if (bytes.size() >= 4 && bytes.substr(0, 4) == std::string_view("PK\x03\x04", 4)) {
    // LibTorch's archives are TorchScript zips; loading one runs code stored in it.
    throw ObsoleteCheckpointError::about(name);
  }
  Reader r(bytes, name);
  std::string_view magic = r.take(sizeof(kArchiveMagic), "the magic number");
  if (magic != std::string_view(kArchiveMagic, sizeof(kArchiveMagic)))
    r.fail(0, "it does not start with LOCKSTEP-TENSORS");
  size_t at = r.pos();
  uint32_t version = r.u32("the version");
  if (version != kVersion) {
    r.fail(at, fmt::format("format version {} is not supported (this lockstep reads version {})", version, kVersion));
  }
  at = r.pos();
  uint32_t flags = r.u32("the flags");
  if (flags != 0) r.fail(at, fmt::format("unknown flags {:#x}", flags));
  at = r.pos();
  uint64_t count = r.u64("the entry count");
  if (count > r.remaining() / kMinEntryBytes) {
    r.fail(at, fmt::format("it claims {} entries but only {} bytes follow", count, r.remaining()));
  }
  auto& entries = archive.impl_->entries;
  for (uint64_t i = 0; i < count; ++i) {
    r.setKey("");
    size_t entryAt = r.pos();
    uint32_t keySize = r.u32("a key's length");
    if (keySize == 0 || keySize > kMaxKeyBytes) {
      r.fail(entryAt, fmt::format("entry {} has a key of {} bytes (1 to {} allowed)", i, keySize, kMaxKeyBytes));
    }
    std::string key(r.take(keySize, "a key"));
    r.setKey(key);
    if (entries.count(key)) r.fail(entryAt, "the key appears twice");
    size_t kindAt = r.pos();
    uint8_t kind = r.u8("the value's kind");
    Value value;
    switch (kind) {
      case static_cast<uint8_t>(Kind::kTensor): value = readTensor(r); break;
      case static_cast<uint8_t>(Kind::kInt): value = static_cast<int64_t>(r.u64("an int64")); break;
      case static_cast<uint8_t>(Kind::kDouble): {
        uint64_t bits = r.u64("a double");
        double d = 0;
        std::memcpy(&d, &bits, sizeof(d));
        value = d;
        break;
      }
      case static_cast<uint8_t>(Kind::kBool): {
        size_t boolAt = r.pos();
        uint8_t b = r.u8("a bool");
        if (b > 1) r.fail(boolAt, fmt::format("a bool holds {}", b));
        value = b == 1;
        break;
      }
      case static_cast<uint8_t>(Kind::kString): {
        uint64_t size = r.u64("a string's length");
        value = std::string(r.take(size, "a string"));
        break;
      }
      default: r.fail(kindAt, fmt::format("unknown value kind {}", kind));
    }
    entries.emplace(std::move(key), std::move(value));
  }
  r.setKey("");
  if (r.remaining() != 0) r.fail(r.pos(), fmt::format("{} unexpected trailing bytes", r.remaining()));
  return archive;
}

}  // namespace lockstep
