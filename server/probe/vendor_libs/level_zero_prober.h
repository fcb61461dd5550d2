// The Level Zero Sysman prober: loads libze_loader.so.1 with dlopen at run time
// (declarations in level_zero_api.h, no build-time Intel dependency) and adds what Sysman knows
// to the Intel GPU row (ROW_XPU), matched by PCI bus id: name, UUID, device memory per module and
// in total, tiles (sub-devices) and the device count each FLAT/COMPOSITE hierarchy presents. It
// runs in its own child process like every vendor prober (vendor_prober.h, VendorProber).
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LEVEL_ZERO_PROBER_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LEVEL_ZERO_PROBER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/probe/host/facts.h"
#include "server/probe/vendor_libs/vendor_prober.h"

namespace devplace::probe {

// One device memory module (zesMemoryGetProperties / zesMemoryGetState).
struct ZeMemoryModule {
  std::optional<uint32_t> tile;  // the sub-device it sits on, when on one
  uint64_t size_bytes = 0;       // state size, else physicalSize
  std::optional<uint64_t> free_bytes;
  int health = 0;  // zes_mem_health_t
};

// One Sysman device (a card).
struct ZeGpu {
  int index = -1;      // position across drivers, in the loader's order
  std::string bus_id;  // canonical
  std::string name;    // core.name
  std::string uuid;    // core.uuid as 8-4-4-4-12 hex; empty when all zero
  uint32_t tiles = 0;  // numSubdevices
  std::string driver_version;
  std::vector<ZeMemoryModule> memory;
  // zesDeviceProcessesGetState: (pid, device memory bytes) of each process; absent when the call
  // is missing or failed.
  std::optional<std::vector<std::pair<uint32_t, uint64_t>>> processes;
  // "Level Zero zesMemoryGetState: ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)" when lost.
  std::string lost;
};

struct ZeSnapshot {
  std::optional<std::string> unusable;
  bool skipped = false;
  // Read through the core API (the loader has no Sysman 1.5): names, UUIDs and bus ids only; the
  // note says what was not read. `gpus` then holds one entry per PCI function, its `tiles` the
  // number of root devices the loader listed on it (FLAT hierarchy: one per tile) when above 1.
  bool core_only = false;
  std::vector<ZeGpu> gpus;
  std::vector<std::string> notes;
  std::vector<std::string> problems;
};

// Loads `library`, zesInit(0), reads every device of every driver, unloads. A loader without
// zesInit / zesDriverGet / zesDeviceGet (older than Sysman 1.5) but with the core API is read with
// zeInit(ZE_INIT_FLAG_GPU_ONLY), zeDriverGet, zeDeviceGet, zeDeviceGetProperties and
// zeDevicePciGetPropertiesExt instead (core_only).
ZeSnapshot ReadLevelZero(const std::string& library, VendorCall& call);

// Merges `snapshot` into the XPU row of `facts` by bus id: the name; uuid ("ze-" form in
// attribute "level_zero_uuid", and uuid when sysfs gave none); memory_total_bytes / free as the
// sum of the device-located modules (memory_source=level_zero) and attribute
// "memory_modules" ("tile0:17179869184/16106127360,tile1:..." size/free per module); tiles as
// sub_device_count when more than one, with attributes "level_zero_tiles",
// "flat_device_count" (tiles, or 1) and "composite_device_count" (1): what ZE_FLAT_DEVICE_HIERARCHY
// FLAT (the default) and COMPOSITE present; each module's health as a health counter
// "memory.<device|tileN>.health" (CRITICAL and REPLACE effect FAULT, DEGRADED DEGRADED, UNKNOWN
// unknown; BuildInventory derives the device's health from them); a lost device (DEVICE_LOST) is
// HEALTH_LOST with the call.
absl::StatusOr<ProbeOutcome> MergeLevelZero(const ZeSnapshot& snapshot, HostFacts& facts);

// The vendor prober "level_zero": skipped without an Intel GPU on the PCI bus.
VendorProber LevelZeroProber(std::string library);

// "ZE_RESULT_ERROR_DEVICE_LOST (0x70000001)" for the named codes, else "Level Zero result 0x...".
std::string ZeResultName(uint32_t code);

}  // namespace devplace::probe

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LEVEL_ZERO_PROBER_H_
