// Routes gRPC core's own log lines (`E1130 ... chttp2_server.cc:...] ...`) into devplaced's
// logger (server/logging), in its text or JSON format, rate-limited.
#ifndef DEVPLACE_SERVER_SERVICE_GRPC_LOG_H_
#define DEVPLACE_SERVER_SERVICE_GRPC_LOG_H_

#include "spdlog/common.h"

namespace devplace::service {

// Installs gpr_set_log_function: each gRPC line becomes `event=library_log source=grpc file=...
// line=... message="..."` at the matching level, at most `per_second` a second (then one
// `event=library_log_suppressed source=grpc suppressed=K` line). gRPC's own verbosity is set to
// DEBUG when `level` is debug, else ERROR (gRPC's default; its INFO lines are internal chatter).
// Call once, before the server starts.
void RouteGrpcLogs(spdlog::level::level_enum level, int per_second);

}  // namespace devplace::service

#endif  // DEVPLACE_SERVER_SERVICE_GRPC_LOG_H_
