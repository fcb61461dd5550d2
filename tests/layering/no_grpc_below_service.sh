#!/usr/bin/env bash
# docs/ARCHITECTURE.md: common, placement, probe, inventory, export, metrics, logging and torch never include gRPC headers (only
# protobuf), so offline tools and tests use them without a server. Fails listing any offender.
set -euo pipefail
root="$1"
hits=$(grep -rnE '#\s*include\s*[<"](grpc|grpcpp)/|\.grpc\.pb\.h' \
  "$root/server/common" "$root/server/placement" "$root/server/probe" "$root/server/inventory" "$root/server/metrics" "$root/server/logging" "$root/server/export" "$root/server/torch" || true)
if [ -n "$hits" ]; then
  echo "gRPC included below server/service:"
  echo "$hits"
  exit 1
fi
echo "no gRPC header under server/common, server/placement, server/probe, server/inventory, server/metrics, server/logging, server/export, server/torch"
