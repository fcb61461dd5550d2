// libdevplace: the devices Kubernetes DRA allocated to this container, read from the DRA Device
// Metadata files (ReadDeviceAllocation), for ResolveDeviceRequest.device_allocation (rule P-DRA).
// File format: Kubernetes documentation "Access DRA Device Metadata" and "Dynamic Resource
// Allocation: Device metadata" (a stream of DeviceMetadata objects, one per API version, newest
// first; consumers use the first they can decode, as Go's json.Decoder does: what follows it is
// never read). Every bound is client/common/bounded_read.h's rule; the Python client's
// _device_metadata.py reads the same way, and tests/client/reader_table.txt holds both to it.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/charconv.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "client/common/bounded_read.h"
#include "client/readers.h"
#include "devplace/client.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace devplace {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr absl::string_view kApiVersion = "metadata.resource.k8s.io/v1alpha1";
constexpr absl::string_view kFileSuffix = "-metadata.json";
// The bounds of DeviceAllocation (devplace.proto); the daemon refuses a request beyond them.
constexpr int kMaxDevices = 1024;
constexpr int kMaxAttributes = 64;
constexpr size_t kMaxStringBytes = 256;
constexpr size_t kMaxSourceBytes = 512;
// Of a file: the JSON values looked at, and how deep one may nest (a DeviceMetadata object nests
// 7 deep; protobuf's own parser gives up somewhere above 33).
constexpr int kMaxValues = 64;
constexpr int kMaxDepth = 32;

// The attribute names the daemon identifies an allocated device by (server/placement/allocation.cc,
// rule P-DRA), plain or qualified by the device's driver ("gpu.nvidia.com/uuid"): kept whatever
// the number of attributes.
constexpr absl::string_view kIdentifyingAttributes[] = {"uuid", "pciBusID", "pciAddr", "pciAddress", "minor", "index"};
bool IdentifyingAttribute(absl::string_view key, absl::string_view driver) {
  if (key == "resource.kubernetes.io/pciBusID") return true;
  if (!driver.empty() && key.size() > driver.size() && absl::StartsWith(key, driver) && key[driver.size()] == '/') {
    key.remove_prefix(driver.size() + 1);
  }
  for (absl::string_view name : kIdentifyingAttributes) {
    if (key == name) return true;
  }
  return false;
}

bool JsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The deepest nesting of the value at text[i], by the brackets outside strings up to the one that
// closes the first opened (or the end of the text): whether it stays within kMaxDepth. The same
// scan as the Python reader's, so both refuse the same files for depth before parsing them.
bool DepthWithin(absl::string_view text, size_t i) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return false;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return true;
    }
  }
  return true;
}

// RFC 8259 JSON, strictly (protobuf's parser also takes "1." and trailing commas, Python's json
// does not): the end of the value at text[i], or npos. Strings must be UTF-8 without raw control
// characters, every \u escape of a surrogate paired; numbers must fit a double.
class StrictJson {
 public:
  explicit StrictJson(absl::string_view text) : t_(text) {}

  // `depth`: the containers this value is in.
  size_t Value(size_t i, int depth) {
    if (i >= t_.size()) return npos;
    if ((t_[i] == '{' || t_[i] == '[') && depth >= kMaxDepth) return npos;
    switch (t_[i]) {
      case '{': return Container(i, depth, '}', true);
      case '[': return Container(i, depth, ']', false);
      case '"': return String(i);
      case 't': return Literal(i, "true");
      case 'f': return Literal(i, "false");
      case 'n': return Literal(i, "null");
      default: return Number(i);
    }
  }

  static constexpr size_t npos = absl::string_view::npos;

 private:
  size_t Space(size_t i) const {
    while (i < t_.size() && JsonSpace(t_[i])) ++i;
    return i;
  }

  size_t Literal(size_t i, absl::string_view word) const {
    return t_.substr(i, word.size()) == word ? i + word.size() : npos;
  }

  size_t Container(size_t i, int depth, char close, bool object) {
    i = Space(i + 1);
    if (i < t_.size() && t_[i] == close) return i + 1;
    while (true) {
      if (object) {
        if (i >= t_.size() || t_[i] != '"' || (i = String(i)) == npos) return npos;
        i = Space(i);
        if (i >= t_.size() || t_[i] != ':') return npos;
        i = Space(i + 1);
      }
      if ((i = Value(i, depth + 1)) == npos) return npos;
      i = Space(i);
      if (i >= t_.size()) return npos;
      if (t_[i] == close) return i + 1;
      if (t_[i] != ',') return npos;
      i = Space(i + 1);
    }
  }

  // The four hex digits at t_[i], or -1.
  int Hex4(size_t i) const {
    if (i + 4 > t_.size()) return -1;
    int v = 0;
    for (size_t k = i; k < i + 4; ++k) {
      const char c = t_[k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  size_t String(size_t i) {
    ++i;  // the opening quote
    const size_t start = i;
    while (i < t_.size()) {
      const unsigned char c = static_cast<unsigned char>(t_[i]);
      if (c == '"') {
        return reading::IsUtf8(t_.substr(start, i - start)) ? i + 1 : npos;
      }
      if (c < 0x20) return npos;
      if (c != '\\') {
        ++i;
        continue;
      }
      if (i + 1 >= t_.size()) return npos;
      const char e = t_[i + 1];
      if (e == 'u') {
        const int u = Hex4(i + 2);
        if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return npos;  // a low surrogate alone
        i += 6;
        if (u >= 0xD800 && u <= 0xDBFF) {  // a high surrogate: its low one must follow
          if (t_.substr(i, 2) != "\\u") return npos;
          const int low = Hex4(i + 2);
          if (low < 0xDC00 || low > 0xDFFF) return npos;
          i += 6;
        }
      } else if (absl::string_view("\"\\/bfnrt").find(e) != absl::string_view::npos) {
        i += 2;
      } else {
        return npos;
      }
    }
    return npos;
  }

  size_t Number(size_t i) const {
    const size_t start = i;
    const auto digit = [&](size_t k) { return k < t_.size() && t_[k] >= '0' && t_[k] <= '9'; };
    if (i < t_.size() && t_[i] == '-') ++i;
    if (!digit(i)) return npos;
    if (t_[i] == '0') {
      ++i;
    } else {
      while (digit(i)) ++i;
    }
    if (i < t_.size() && t_[i] == '.') {
      if (!digit(++i)) return npos;
      while (digit(i)) ++i;
    }
    if (i < t_.size() && (t_[i] == 'e' || t_[i] == 'E')) {
      ++i;
      if (i < t_.size() && (t_[i] == '+' || t_[i] == '-')) ++i;
      if (!digit(i)) return npos;
      while (digit(i)) ++i;
    }
    double value = 0;
    const absl::from_chars_result r = absl::from_chars(t_.data() + start, t_.data() + i, value);
    if (r.ptr != t_.data() + i || (r.ec == std::errc::result_out_of_range && value != 0)) return npos;  // overflow
    return i;
  }

  absl::string_view t_;
};

const Value* Field(const Struct& s, const std::string& name) {
  const auto it = s.fields().find(name);
  return it == s.fields().end() ? nullptr : &it->second;
}

std::string StringField(const Struct& s, const std::string& name) {
  const Value* v = Field(s, name);
  return v != nullptr && v->has_string_value() ? v->string_value() : "";
}

// A DeviceAttribute ({"int": 1} / {"string": ...} / {"bool": ...} / {"version": ...}) as text;
// false when it holds none of these.
bool AttributeText(const Value& value, std::string* out) {
  if (!value.has_struct_value()) return false;
  const Struct& a = value.struct_value();
  if (const Value* v = Field(a, "int"); v != nullptr && v->has_number_value()) {
    const double n = v->number_value();
    if (n != std::floor(n) || std::fabs(n) > 9.0e15) return false;
    *out = absl::StrCat(static_cast<int64_t>(n));
    return true;
  }
  if (const Value* v = Field(a, "bool"); v != nullptr && v->has_bool_value()) {
    *out = v->bool_value() ? "true" : "false";
    return true;
  }
  for (const char* kind : {"string", "version"}) {
    if (const Value* v = Field(a, kind); v != nullptr && v->has_string_value()) {
      *out = v->string_value();
      return true;
    }
  }
  return false;
}

class Reader {
 public:
  Reader(v1::DeviceAllocation* out, const internal::ReadLimits& limits)
      : out_(*out), limits_(limits), set_(limits.time, limits.total_bytes, out->mutable_problems()) {}

  // True once the walk must stop (the budget is spent).
  bool stopped() const { return set_.stopped(); }

  void Problem(const std::string& what) { set_.Problem(what); }

  // The entries of `dir` (its path under the metadata directory: `rel`) that `keep` accepts, the
  // first in name order; a listing that fails, other than for a missing directory, is a problem.
  std::vector<std::string> List(const std::string& dir, const std::string& rel,
                                absl::FunctionRef<bool(absl::string_view)> keep) {
    bool more = false;
    absl::StatusOr<std::vector<std::string>> names =
        reading::ListNames(dir, limits_.directory_entries, set_.budget(), keep, &more);
    if (!names.ok()) {
      if (!absl::IsNotFound(names.status())) set_.Failed(rel, names.status());
      return {};
    }
    if (more) {
      Problem(absl::StrCat(rel, ": more than ", limits_.directory_entries, " entries; only the first ",
                           limits_.directory_entries, " by name read"));
    }
    return *std::move(names);
  }

  // One metadata file: `rel` is its path under the directory, for problems.
  void File(const std::string& path, const std::string& rel, const std::string& claim, bool from_template,
            const std::string& request_dir) {
    const reading::PathStat st = reading::StatPath(path);
    if (st.error != 0) return Problem(absl::StrCat(rel, ": ", reading::CannotRead(st.error)));
    if (!st.regular()) {
      return Problem(absl::StrCat(rel, ": not a regular file (", reading::KindText(st.mode), "); not read"));
    }
    absl::StatusOr<std::string> text = reading::ReadRegularFile(path, limits_.file_bytes, set_.budget());
    if (!text.ok()) return set_.Failed(rel, text.status());
    Objects(*text, rel, claim, from_template, request_dir);
  }

 private:
  void Objects(absl::string_view text, const std::string& rel, const std::string& claim, bool from_template,
               const std::string& request_dir) {
    std::vector<std::string> seen;
    size_t i = 0;
    for (int count = 0;; ++count) {
      while (i < text.size() && JsonSpace(text[i])) ++i;
      if (i >= text.size()) break;
      if (count == kMaxValues) {
        return Problem(absl::StrCat(rel, ": no DeviceMetadata of apiVersion ", kApiVersion, " in its first ",
                                    kMaxValues, " objects"));
      }
      if (!DepthWithin(text, i)) {
        return Problem(absl::StrCat(rel, ": nested deeper than ", kMaxDepth, " levels; not read"));
      }
      const size_t end = StrictJson(text).Value(i, 0);
      Struct metadata;
      if (end == StrictJson::npos ||
          !google::protobuf::util::JsonStringToMessage(std::string(text.substr(i, end - i)), &metadata).ok()) {
        return Problem(absl::StrCat(rel, ": not a JSON stream of DeviceMetadata objects"));
      }
      i = end;
      const std::string api = StringField(metadata, "apiVersion");
      if (api != kApiVersion || StringField(metadata, "kind") != "DeviceMetadata") {
        seen.push_back(absl::StrCat(StringField(metadata, "kind"), " ", api));
        continue;  // another API version: the same data, in a version this client does not know
      }
      return Requests(metadata, rel, claim, from_template, request_dir);
    }
    if (seen.empty()) return Problem(absl::StrCat(rel, ": empty (its driver writes it later, or not at all)"));
    Problem(absl::StrCat(rel, ": no DeviceMetadata of apiVersion ", kApiVersion, " (found: ", absl::StrJoin(seen, ", "),
                         ")"));
  }

  void Requests(const Struct& metadata, const std::string& rel, const std::string& claim, bool from_template,
                const std::string& request_dir) {
    const Value* requests = Field(metadata, "requests");
    if (requests == nullptr || !requests->has_list_value()) return;
    for (const Value& r : requests->list_value().values()) {
      if (!r.has_struct_value()) continue;
      const std::string name = StringField(r.struct_value(), "name");
      const Value* devices = Field(r.struct_value(), "devices");
      if (devices == nullptr || !devices->has_list_value()) continue;
      for (const Value& d : devices->list_value().values()) {
        if (d.has_struct_value()) Device(d.struct_value(), rel, claim, from_template, name.empty() ? request_dir : name);
      }
    }
  }

  void Device(const Struct& d, const std::string& rel, const std::string& claim, bool from_template,
              const std::string& request) {
    if (out_.devices_size() >= kMaxDevices) {
      if (!truncated_) Problem(absl::StrCat(rel, ": more than ", kMaxDevices, " devices in all; the rest not sent"));
      truncated_ = true;
      return;
    }
    v1::AllocatedDevice device;
    device.set_claim(claim);
    device.set_from_template(from_template);
    device.set_request(request);
    device.set_driver(StringField(d, "driver"));
    device.set_pool(StringField(d, "pool"));
    device.set_name(StringField(d, "name"));
    for (const std::string* s : {&device.claim(), &device.request(), &device.driver(), &device.pool(), &device.name()}) {
      if (s->size() > kMaxStringBytes) {
        Problem(absl::StrCat(rel, ": a device with a name over ", kMaxStringBytes, " bytes; not sent"));
        return;
      }
    }
    if (device.driver().empty() || device.pool().empty() || device.name().empty()) {
      Problem(absl::StrCat(rel, ": a device without a driver, pool or name; not sent"));
      return;
    }
    if (const Value* attributes = Field(d, "attributes"); attributes != nullptr && attributes->has_struct_value()) {
      // The attributes that identify the hardware first (the daemon matches on them), then the
      // others, each in name order (protobuf's map is not ordered): the first kMaxAttributes that
      // fit. Any left out is a problem line.
      std::vector<std::string> names;
      for (const auto& [key, value] : attributes->struct_value().fields()) names.push_back(key);
      std::sort(names.begin(), names.end(), [&device](const std::string& a, const std::string& b) {
        const bool ia = IdentifyingAttribute(a, device.driver()), ib = IdentifyingAttribute(b, device.driver());
        return ia != ib ? ia : a < b;
      });
      int cut = 0;
      for (const std::string& key : names) {
        std::string text;
        if (key.size() > kMaxStringBytes || !AttributeText(attributes->struct_value().fields().at(key), &text) ||
            text.size() > kMaxStringBytes) {
          continue;
        }
        if (device.attributes_size() >= kMaxAttributes) {
          ++cut;
          continue;
        }
        (*device.mutable_attributes())[key] = text;
      }
      if (cut > 0) {
        Problem(absl::StrCat(rel, ": device ", device.name(), " has more than ", kMaxAttributes, " attributes; ", cut,
                             " not sent (uuid, the PCI address, minor and index are kept)"));
      }
    }
    *out_.add_devices() = std::move(device);
  }

  v1::DeviceAllocation& out_;
  const internal::ReadLimits& limits_;
  reading::ReadSet set_;
  bool truncated_ = false;
};

bool Any(absl::string_view) { return true; }

}  // namespace

namespace internal {

ReadLimits DraLimits() { return {absl::Seconds(5), reading::kMiB, 16 * reading::kMiB, 1024}; }

absl::StatusOr<v1::DeviceAllocation> ReadDeviceAllocation(const std::string& dir, const ReadLimits& limits) {
  const reading::PathStat st = reading::StatPath(dir);
  const std::string shown = reading::EscapeBytes(dir);
  if (st.error == ENOENT || st.error == ENOTDIR) {
    return absl::NotFoundError(absl::StrCat(shown, ": no such directory (no DRA device metadata in this container)"));
  }
  if (st.error != 0) return absl::InvalidArgumentError(absl::StrCat(shown, ": ", reading::CannotRead(st.error)));
  if (!st.directory()) {
    return absl::InvalidArgumentError(absl::StrCat(shown, ": not a directory; want the DRA device metadata directory, "
                                                   "e.g. ", kDraMetadataDir));
  }
  v1::DeviceAllocation out;
  out.set_source(reading::CutUtf8(shown, kMaxSourceBytes));
  Reader reader(&out, limits);
  const auto metadata_file = [](absl::string_view name) { return absl::EndsWith(name, kFileSuffix); };
  for (const std::string kind : {"resourceclaims", "resourceclaimtemplates"}) {
    if (reader.stopped()) return out;
    const bool from_template = kind == "resourceclaimtemplates";
    const std::string base = absl::StrCat(dir, "/", kind);
    for (const std::string& claim : reader.List(base, kind, Any)) {
      if (reader.stopped()) return out;
      const std::string claim_path = absl::StrCat(base, "/", claim);
      const std::string claim_rel = absl::StrCat(kind, "/", reading::EscapeBytes(claim));
      if (!reading::StatPath(claim_path).directory()) continue;  // a stray file, or gone
      for (const std::string& request : reader.List(claim_path, claim_rel, Any)) {
        if (reader.stopped()) return out;
        const std::string request_path = absl::StrCat(claim_path, "/", request);
        const std::string request_rel = absl::StrCat(claim_rel, "/", reading::EscapeBytes(request));
        if (!reading::StatPath(request_path).directory()) continue;
        for (const std::string& name : reader.List(request_path, request_rel, metadata_file)) {
          if (reader.stopped()) return out;
          reader.File(absl::StrCat(request_path, "/", name), absl::StrCat(request_rel, "/", reading::EscapeBytes(name)),
                      reading::EscapeBytes(claim), from_template, reading::EscapeBytes(request));
        }
      }
    }
  }
  return out;
}

}  // namespace internal

absl::StatusOr<v1::DeviceAllocation> ReadDeviceAllocation(const std::string& dir) {
  return internal::ReadDeviceAllocation(dir, internal::DraLimits());
}

}  // namespace devplace
