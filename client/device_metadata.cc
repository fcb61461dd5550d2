// libdevplace: the devices Kubernetes DRA allocated to this container, read from the DRA Device
// Metadata files (ReadDeviceAllocation), for ResolveDeviceRequest.device_allocation (rule P-DRA).
// File format: Kubernetes documentation "Access DRA Device Metadata" and "Dynamic Resource
// Allocation: Device metadata" (a stream of DeviceMetadata objects, one per API version, newest
// first; consumers use the first they can decode).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "devplace/client.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace devplace {
namespace {

namespace fs = std::filesystem;
using google::protobuf::Struct;
using google::protobuf::Value;

constexpr absl::string_view kApiVersion = "metadata.resource.k8s.io/v1alpha1";
constexpr absl::string_view kFileSuffix = "-metadata.json";
// The bounds of DeviceAllocation (devplace.proto); the daemon refuses a request beyond them.
constexpr int kMaxDevices = 1024;
constexpr int kMaxAttributes = 64;
constexpr size_t kMaxStringBytes = 256;
constexpr int kMaxProblems = 64;
constexpr size_t kMaxProblemBytes = 1024;

// The top-level JSON values of a stream of objects ("{...}{...}" or one per line), as text.
// Unbalanced text ends up as the last piece, for the JSON parser to refuse.
std::vector<absl::string_view> SplitStream(absl::string_view text) {
  std::vector<absl::string_view> out;
  size_t i = 0;
  while (true) {
    while (i < text.size() && absl::string_view(" \t\n\r").find(text[i]) != absl::string_view::npos) ++i;
    if (i >= text.size()) break;
    const size_t start = i;
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
        ++depth;
      } else if ((c == '}' || c == ']') && --depth == 0) {
        ++i;
        break;
      }
    }
    out.push_back(text.substr(start, i - start));
  }
  return out;
}

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
  explicit Reader(v1::DeviceAllocation* out) : out_(*out) {}

  void Problem(const std::string& what) {
    if (out_.problems_size() >= kMaxProblems) return;
    out_.add_problems(what.size() > kMaxProblemBytes ? what.substr(0, kMaxProblemBytes) : what);
  }

  // One metadata file: `rel` is its path under the directory, for problems.
  void File(const fs::path& path, const std::string& rel, const std::string& claim, bool from_template,
            const std::string& request_dir) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      Problem(absl::StrCat(rel, ": cannot read it (", std::error_code(errno, std::generic_category()).message(), ")"));
      return;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    const std::string text = buffer.str();
    const std::vector<absl::string_view> objects = SplitStream(text);
    if (objects.empty()) {
      Problem(absl::StrCat(rel, ": empty (its driver writes it later, or not at all)"));
      return;
    }
    std::vector<std::string> seen;
    for (absl::string_view object : objects) {
      Struct metadata;
      google::protobuf::util::JsonParseOptions options;
      if (!google::protobuf::util::JsonStringToMessage(std::string(object), &metadata, options).ok()) {
        Problem(absl::StrCat(rel, ": not a JSON stream of DeviceMetadata objects"));
        return;
      }
      const std::string api = StringField(metadata, "apiVersion");
      if (api != kApiVersion || StringField(metadata, "kind") != "DeviceMetadata") {
        seen.push_back(absl::StrCat(StringField(metadata, "kind"), " ", api));
        continue;  // another API version: the same data, in a version this client does not know
      }
      Requests(metadata, rel, claim, from_template, request_dir);
      return;
    }
    Problem(absl::StrCat(rel, ": no DeviceMetadata of apiVersion ", kApiVersion, " (found: ", absl::StrJoin(seen, ", "),
                         ")"));
  }

 private:
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
      // In name order (protobuf's map is not ordered), the first kMaxAttributes that fit.
      std::vector<std::string> names;
      for (const auto& [key, value] : attributes->struct_value().fields()) names.push_back(key);
      std::sort(names.begin(), names.end());
      for (const std::string& key : names) {
        std::string text;
        if (device.attributes_size() >= kMaxAttributes) break;
        if (key.size() > kMaxStringBytes || !AttributeText(attributes->struct_value().fields().at(key), &text) ||
            text.size() > kMaxStringBytes) {
          continue;
        }
        (*device.mutable_attributes())[key] = text;
      }
    }
    *out_.add_devices() = std::move(device);
  }

  v1::DeviceAllocation& out_;
  bool truncated_ = false;
};

// The entries of `dir` that are directories (or, with `files`, regular files), sorted by name.
std::vector<fs::path> Entries(const fs::path& dir, bool files) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (files ? it->is_regular_file(type_ec) : it->is_directory(type_ec)) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

absl::StatusOr<v1::DeviceAllocation> ReadDeviceAllocation(const std::string& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (ec || status.type() == fs::file_type::not_found) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such directory (no DRA device metadata in this container)"));
  }
  if (status.type() != fs::file_type::directory) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": not a directory; want the DRA device metadata directory, "
                                                   "e.g. ", kDraMetadataDir));
  }
  v1::DeviceAllocation out;
  out.set_source(dir);
  Reader reader(&out);
  for (const char* kind : {"resourceclaims", "resourceclaimtemplates"}) {
    const bool from_template = absl::string_view(kind) == "resourceclaimtemplates";
    for (const fs::path& claim : Entries(fs::path(dir) / kind, false)) {
      for (const fs::path& request : Entries(claim, false)) {
        for (const fs::path& file : Entries(request, true)) {
          const std::string name = file.filename().string();
          if (!absl::EndsWith(name, kFileSuffix)) continue;
          reader.File(file,
                      absl::StrCat(kind, "/", claim.filename().string(), "/", request.filename().string(), "/", name),
                      claim.filename().string(), from_template, request.filename().string());
        }
      }
    }
  }
  return out;
}

}  // namespace devplace
