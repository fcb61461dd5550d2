#include "server/service/grpc_log.h"

#include "grpc/support/log.h"
#include "server/logging/logging.h"

namespace devplace::service {
namespace {

logging::RateLimiter* grpc_limiter = nullptr;  // set once by RouteGrpcLogs, never freed

void GrpcLog(gpr_log_func_args* args) {
  spdlog::level::level_enum level = spdlog::level::err;
  if (args->severity == GPR_LOG_SEVERITY_DEBUG) level = spdlog::level::debug;
  if (args->severity == GPR_LOG_SEVERITY_INFO) level = spdlog::level::info;
  logging::LibraryLog(*grpc_limiter, "grpc", level, args->file != nullptr ? args->file : "", args->line,
                      args->message != nullptr ? args->message : "");
}

}  // namespace

void RouteGrpcLogs(spdlog::level::level_enum level, int per_second) {
  if (grpc_limiter == nullptr) grpc_limiter = new logging::RateLimiter(per_second);
  gpr_set_log_verbosity(level <= spdlog::level::debug ? GPR_LOG_SEVERITY_DEBUG : GPR_LOG_SEVERITY_ERROR);
  gpr_set_log_function(&GrpcLog);
}

}  // namespace devplace::service
