// Deterministic JSON for people and golden files.
#ifndef DEVPLACE_SERVER_COMMON_JSON_H_
#define DEVPLACE_SERVER_COMMON_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"

namespace devplace {

// The protobuf JSON mapping of `message` (lowerCamelCase names, enums by name, 64-bit integers
// as strings), pretty-printed, with scalar, enum, repeated and map fields at their default value
// included (unset sub-messages are left out), and map entries sorted by key so the same message
// always prints the same text. Ends without a newline.
// Errors: Internal when the conversion fails.
absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message);

}  // namespace devplace

#endif  // DEVPLACE_SERVER_COMMON_JSON_H_
