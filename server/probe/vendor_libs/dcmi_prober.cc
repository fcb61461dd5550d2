// The DCMI prober (Huawei Ascend): libdcmi.so through dlopen (declarations in dcmi_api.h). Walks
// every card and chip and reads: bus id (dcmi_get_device_pcie_info_v2), card/chip ids, logic and
// physical ids, name ("<chip_type> <chip_name>", e.g. "Ascend 910B3"), the VDie id as the chip's
// unique id, HBM total/used (MB) and health. A chip DCMI says does not exist
// (DCMI_ERR_CODE_DEVICE_NOT_EXIST, or health 0xffffffff) becomes HEALTH_LOST; health 2 or 3
// (important / urgent alarm) HEALTH_FAULT; health 1 (general alarm) stays usable and is kept in
// the "dcmi_health" attribute. On full probes it also reads the chip's HBM ECC counts
// (dcmi_get_device_ecc_info, library_health.h; docs/PROBE.md "Device health", the DCMI table).
#include <cstdio>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/probe/vendor_libs/accel_library.h"
#include "server/probe/vendor_libs/dcmi_api.h"
#include "server/probe/vendor_libs/library_health.h"

namespace devplace::probe {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

struct Dcmi {
  decltype(&dcmi_init) init = nullptr;
  decltype(&dcmi_get_card_num_list) card_list = nullptr;
  decltype(&dcmi_get_device_num_in_card) chips_in_card = nullptr;
  decltype(&dcmi_get_device_pcie_info_v2) pcie = nullptr;
  decltype(&dcmi_get_device_logic_id) logic_id = nullptr;
  decltype(&dcmi_get_device_phyid_from_logicid) phy_id = nullptr;
  decltype(&dcmi_get_device_chip_info) chip_info = nullptr;
  decltype(&dcmi_get_device_die_v2) die = nullptr;
  decltype(&dcmi_get_device_hbm_info) hbm = nullptr;
  decltype(&dcmi_get_device_health) health = nullptr;
  decltype(&dcmi_get_device_ecc_info) ecc = nullptr;
  bool read_health = false;  // full probes only
};

std::string DcmiReturnName(int code) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {DCMI_OK, "DCMI_OK"},
      {DCMI_ERR_CODE_INVALID_PARAMETER, "DCMI_ERR_CODE_INVALID_PARAMETER"},
      {DCMI_ERR_CODE_OPER_NOT_PERMITTED, "DCMI_ERR_CODE_OPER_NOT_PERMITTED"},
      {DCMI_ERR_CODE_MEM_OPERATE_FAIL, "DCMI_ERR_CODE_MEM_OPERATE_FAIL"},
      {DCMI_ERR_CODE_INNER_ERR, "DCMI_ERR_CODE_INNER_ERR"},
      {DCMI_ERR_CODE_TIME_OUT, "DCMI_ERR_CODE_TIME_OUT"},
      {DCMI_ERR_CODE_INVALID_DEVICE_ID, "DCMI_ERR_CODE_INVALID_DEVICE_ID"},
      {DCMI_ERR_CODE_DEVICE_NOT_EXIST, "DCMI_ERR_CODE_DEVICE_NOT_EXIST"},
      {DCMI_ERR_CODE_IOCTL_FAIL, "DCMI_ERR_CODE_IOCTL_FAIL"},
      {DCMI_ERR_CODE_NOT_REDAY, "DCMI_ERR_CODE_NOT_REDAY"},
      {DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER, "DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER"},
      {DCMI_ERR_CODE_NOT_SUPPORT, "DCMI_ERR_CODE_NOT_SUPPORT"},
  };
  return NamedCode(kNames, "DCMI", code);
}

CallResult ClassifyDcmi(int code) {
  switch (code) {
    case DCMI_OK: return CallResult::kOk;
    case DCMI_ERR_CODE_NOT_SUPPORT:
    case DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER: return CallResult::kNotSupported;
    case DCMI_ERR_CODE_DEVICE_NOT_EXIST: return CallResult::kLost;
    case DCMI_ERR_CODE_OPER_NOT_PERMITTED: return CallResult::kNoPermission;
    default: return CallResult::kOther;
  }
}

constexpr LibraryErrors kDcmiErrors = {"DCMI", DcmiReturnName, ClassifyDcmi};
constexpr LibraryInfo kDcmiInfo = {"dcmi", "DCMI", v1::ROW_NPU, "Ascend NPU"};

std::string HealthText(unsigned int health) {
  switch (health) {
    case 0: return "0 (normal)";
    case 1: return "1 (general alarm)";
    case 2: return "2 (important alarm)";
    case 3: return "3 (urgent alarm)";
    case DCMI_HEALTH_NOT_EXIST: return "0xffffffff (chip does not exist or has not started)";
    default: return absl::StrCat(health, " (unknown)");
  }
}

// The HBM ECC counts, named by dcmi_ecc_info's fields. A double-bit (multi-bit) error cannot be
// corrected: the reference says to locate and rectify the fault, and the count is cleared only when
// the system restarts: FAULT. Single-bit errors were corrected, the lifetime totals and the pages
// isolated are raw counts.
constexpr CounterRule kDoubleBit = {
    "hbm_ecc.double_bit_error_cnt", v1::HEALTH_FAULT,
    "uncorrectable (multi-bit) HBM ECC errors since the system started: data in the chip's memory was lost"};
constexpr CounterRule kRawEcc[] = {
    {"hbm_ecc.single_bit_error_cnt", v1::HEALTH_OK,
     "corrected (single-bit) HBM ECC errors since the system started (a raw count, never a health change)"},
    {"hbm_ecc.total_double_bit_error_cnt", v1::HEALTH_OK,
     "uncorrectable HBM ECC errors over the chip's life (a raw count, never a health change)"},
    {"hbm_ecc.total_single_bit_error_cnt", v1::HEALTH_OK,
     "corrected HBM ECC errors over the chip's life (a raw count, never a health change)"},
    {"hbm_ecc.double_bit_isolated_pages_cnt", v1::HEALTH_OK,
     "memory pages isolated after uncorrectable errors (a raw count, never a health change)"},
};
constexpr CounterRule kEccRules[] = {{"hbm_ecc.enable_flag", v1::HEALTH_OK, ""}, kDoubleBit, kRawEcc[0], kRawEcc[1],
                                     kRawEcc[2], kRawEcc[3]};

void ReadEcc(const Dcmi& lib, int card, int chip, LibraryHealthReader& health) {
  const std::string source = "DCMI dcmi_get_device_ecc_info(DCMI_DEVICE_TYPE_HBM)";
  dcmi_ecc_info ecc = {};
  if (!health.Call("dcmi_get_device_ecc_info", lib.ecc != nullptr, source, kEccRules,
                   [&] { return lib.ecc(card, chip, DCMI_DEVICE_TYPE_HBM, &ecc); })) {
    return;
  }
  const bool on = ecc.enable_flag == 1;
  health.Add("hbm_ecc.enable_flag", absl::StrCat(ecc.enable_flag), source, v1::HEALTH_OK,
             on ? "ECC detection on" : "ECC detection off: HBM errors are not counted (a note, not a health change)");
  health.Add(kDoubleBit, source, ecc.double_bit_error_cnt);
  const unsigned int raw[] = {ecc.single_bit_error_cnt, ecc.total_double_bit_error_cnt, ecc.total_single_bit_error_cnt,
                              ecc.double_bit_isolated_pages_cnt};
  for (size_t k = 0; k < std::size(raw); ++k) health.Add(kRawEcc[k], source, raw[k]);
}

// Reads chip `chip` of card `card`; false when its bus id could not be read (then it is not kept).
bool ReadChip(const Dcmi& lib, int card, int chip, LibraryCalls& calls, LibraryDevice& dev) {
  dev.attributes["card_id"] = absl::StrCat(card);
  dev.attributes["chip_id"] = absl::StrCat(chip);
  int logic = -1;
  if (calls.Device(dev, "dcmi_get_device_logic_id", [&] { return lib.logic_id(&logic, card, chip); })) {
    dev.index = logic;
    dev.attributes["logic_id"] = absl::StrCat(logic);
    unsigned int phy = 0;
    if (lib.phy_id != nullptr && calls.Device(dev, "dcmi_get_device_phyid_from_logicid", [&] {
          return lib.phy_id(static_cast<unsigned int>(logic), &phy);
        })) {
      dev.attributes["phy_id"] = absl::StrCat(phy);
    }
  }
  dcmi_pcie_info_all pcie = {};
  if (!calls.Device(dev, "dcmi_get_device_pcie_info_v2", [&] { return lib.pcie(card, chip, &pcie); })) return false;
  dev.bus_id = absl::StrFormat("%04x:%02x:%02x.%x", static_cast<unsigned int>(pcie.domain) & 0xffff,
                               pcie.bdf_busid & 0xff, pcie.bdf_deviceid & 0x1f, pcie.bdf_funcid & 0x7);
  dcmi_chip_info info = {};
  if (lib.chip_info != nullptr &&
      calls.Device(dev, "dcmi_get_device_chip_info", [&] { return lib.chip_info(card, chip, &info); })) {
    const std::string type = BufferText(reinterpret_cast<const char*>(info.chip_type), sizeof info.chip_type);
    const std::string name = BufferText(reinterpret_cast<const char*>(info.chip_name), sizeof info.chip_name);
    dev.name = type.empty() ? name : absl::StrCat(type, " ", name);
    dev.attributes["aicore_count"] = absl::StrCat(info.aicore_cnt);
  }
  dcmi_die_id die = {};
  if (lib.die != nullptr && calls.Device(dev, "dcmi_get_device_die_v2", [&] { return lib.die(card, chip, VDIE, &die); })) {
    std::vector<std::string> words;
    for (unsigned int word : die.soc_die) words.push_back(absl::StrFormat("%08X", word));
    dev.uuid = absl::StrJoin(words, "-");
  }
  dcmi_hbm_info hbm = {};
  if (lib.hbm != nullptr && calls.Device(dev, "dcmi_get_device_hbm_info", [&] { return lib.hbm(card, chip, &hbm); })) {
    dev.memory_total_bytes = hbm.memory_size * kMiB;
    dev.memory_used_bytes = hbm.memory_usage * kMiB;
  }
  unsigned int health = 0;
  if (lib.health != nullptr &&
      calls.Device(dev, "dcmi_get_device_health", [&] { return lib.health(card, chip, &health); })) {
    dev.attributes["dcmi_health"] = absl::StrCat(health);
    const std::string why = absl::StrCat("DCMI dcmi_get_device_health: ", HealthText(health));
    if (health == DCMI_HEALTH_NOT_EXIST) {
      dev.lost = why;
    } else if (health > DCMI_HEALTH_GENERAL_ALARM) {
      dev.fault = why;
    }
  }
  if (lib.read_health) {
    LibraryHealthReader reader(calls, dev);
    ReadEcc(lib, card, chip, reader);
  }
  return true;
}

LibrarySnapshot ReadDcmi(const std::string& path, VendorCall& call, bool usage_only) {
  LibrarySnapshot out;
  LoadedLibrary loaded;
  Dcmi lib;
  lib.read_health = !usage_only;
  call.Enter("dlopen");
  if (!loaded.Open(path, out)) return out;
  loaded.Required("dcmi_init", lib.init);
  loaded.Required("dcmi_get_card_num_list", lib.card_list);
  loaded.Required("dcmi_get_device_num_in_card", lib.chips_in_card);
  loaded.Required("dcmi_get_device_pcie_info_v2", lib.pcie);
  loaded.Required("dcmi_get_device_logic_id", lib.logic_id);
  loaded.Optional("dcmi_get_device_phyid_from_logicid", lib.phy_id);
  loaded.Optional("dcmi_get_device_chip_info", lib.chip_info);
  loaded.Optional("dcmi_get_device_die_v2", lib.die);
  loaded.Optional("dcmi_get_device_hbm_info", lib.hbm);
  loaded.Optional("dcmi_get_device_health", lib.health);
  if (lib.read_health) loaded.Optional("dcmi_get_device_ecc_info", lib.ecc);
  if (!loaded.CheckSymbols(path, "DCMI", out)) return out;

  call.Enter("dcmi_init");
  if (const int init = lib.init(); init != DCMI_OK) {
    out.skipped = init == DCMI_ERR_CODE_NOT_REDAY;
    out.unusable = absl::StrCat(out.skipped ? "Ascend driver not ready: " : "", "dcmi_init: ", DcmiReturnName(init));
    loaded.Close(call);
    return out;
  }
  LibraryCalls calls(kDcmiErrors, call, out);
  int card_count = 0;
  int cards[DCMI_MAX_CARD_NUM] = {};
  if (!calls.System("dcmi_get_card_num_list", [&] { return lib.card_list(&card_count, cards, DCMI_MAX_CARD_NUM); })) {
    card_count = 0;
  }
  for (int c = 0; c < card_count && c < DCMI_MAX_CARD_NUM; ++c) {
    int chips = 0;
    if (!calls.System("dcmi_get_device_num_in_card", [&] { return lib.chips_in_card(cards[c], &chips); })) continue;
    for (int chip = 0; chip < chips; ++chip) {
      ++out.count;
      LibraryDevice dev;
      if (!ReadChip(lib, cards[c], chip, calls, dev)) {
        // No bus id: the chip cannot be attributed to a PCI device; say what happened to it.
        const std::string what = !dev.lost.empty() ? dev.lost : dev.no_permission;
        if (!what.empty()) out.notes.push_back(absl::StrCat("DCMI card ", cards[c], " chip ", chip, ": ", what));
        continue;
      }
      AddLibraryDevice(std::move(dev), "DCMI", out);
    }
  }
  // DCMI has no shutdown call: the library is only unloaded.
  loaded.Close(call);
  return out;
}

}  // namespace

VendorProber prober_factory::dcmi(std::string library, const ProbeOptions& options) {
  return LibraryProber(kDcmiInfo, std::move(library),
                       [usage_only = options.usage_only](const std::string& path, const std::vector<std::string>&,
                                                         VendorCall& call) { return ReadDcmi(path, call, usage_only); });
}

}  // namespace devplace::probe
