// The devplace CLI's shared output on stdout: text tables, sizes, timestamps, enum and row names,
// the --json printers (messages, string objects, key=value lists), and the inventory view that `inventory`, `refresh` and `probe` all print.
// Error lines on stderr are cli.h's UsageError() and Fail().
#ifndef DEVPLACE_CLIENT_CLI_OUTPUT_H_
#define DEVPLACE_CLIENT_CLI_OUTPUT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"

namespace devplace::cli {

// Prints `rows` (the first is the header) on stdout as left-aligned columns separated by two
// spaces, each line without trailing spaces. Rows may have different lengths.
void PrintTable(const std::vector<std::vector<std::string>>& rows);

// A size for people: "512 B" below 1 KiB, else one decimal in the largest binary unit up to PiB
// ("80.0 GiB").
std::string Bytes(uint64_t bytes);

// `ts` in UTC to the second ("2026-01-31T12:00:00Z"), or "-" when it is unset (all zero).
std::string Timestamp(const google::protobuf::Timestamp& ts);

// `enum_name` without `prefix` ("BACKEND_STATE_READY" -> "READY"); unchanged without it.
std::string Strip(absl::string_view prefix, const std::string& enum_name);

// Prints the protobuf JSON mapping of `message` (ToJson, server/common/json.h: default-valued scalar
// fields included, maps sorted) indented by two spaces, then a newline, on stdout, flushed. Returns 0, or
// Fail()'s status after its error line when the message cannot be converted.
int PrintJson(const google::protobuf::Message& message);

// Prints `fields` as one JSON object of strings (a google.protobuf.Struct through PrintJson: keys
// sorted, two-space indent; `{}` when empty). Returns PrintJson()'s status.
int PrintJsonObject(const std::vector<std::pair<std::string, std::string>>& fields);

// Prints `pairs`: with --json as PrintJsonObject(), else one KEY=VALUE line each, in their order.
// Returns PrintJson()'s status, or 0.
int PrintKeyValues(const std::vector<std::pair<std::string, std::string>>& pairs);

// Prints an inventory: with --json as PrintJson(), else the host/CPU/memory/revision/torch lines,
// then the tables of backends, devices, partitions, runtime orders and probe reports (the last
// four only when they have rows). Returns PrintJson()'s status, or 0.
int PrintInventory(const v1::Inventory& inv);

}  // namespace devplace::cli

#endif  // DEVPLACE_CLIENT_CLI_OUTPUT_H_
