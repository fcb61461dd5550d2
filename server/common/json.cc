#include "server/common/json.h"

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/type_resolver.h"
#include "google/protobuf/util/type_resolver_util.h"

namespace devplace {

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  namespace pb = google::protobuf;
  // MessageToJsonString prints maps in hash order; printing from a deterministic serialization
  // (map entries sorted by key) gives stable output.
  std::string binary;
  {
    pb::io::StringOutputStream raw(&binary);
    pb::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    if (!message.SerializeToCodedStream(&coded)) return absl::InternalError("cannot serialize message");
  }
  constexpr const char kUrlPrefix[] = "type.googleapis.com";
  const std::unique_ptr<pb::util::TypeResolver> resolver(
      pb::util::NewTypeResolverForDescriptorPool(kUrlPrefix, message.GetDescriptor()->file()->pool()));
  pb::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto status = pb::util::BinaryToJsonString(
      resolver.get(), absl::StrCat(kUrlPrefix, "/", message.GetDescriptor()->full_name()), binary, &json, options);
  if (!status.ok()) return absl::InternalError(absl::StrCat("JSON conversion failed: ", status.ToString()));
  while (!json.empty() && json.back() == '\n') json.pop_back();
  return json;
}

}  // namespace devplace
