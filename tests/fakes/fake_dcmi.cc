// fake_dcmi: a stand-in for libdcmi.so (Huawei Ascend) in tests. Exports the DCMI functions
// devplace's prober looks up (server/probe/vendor_libs/dcmi_api.h) and answers them from a script (format in
// accel_fake_script.h) named by FAKE_DCMI_CONFIG; FAKE_DCMI_LOG logs the calls. Device keys: bus_id,
// card <card id> (default: the device number; chips of one card are numbered in script order),
// logic_id and phy_id (default: the device number), name (chip_name, e.g. 910B3; chip_type is
// "Ascend"), aicore <n>, vdie <5 hex words> (dcmi_get_device_die_v2; absent: not supported),
// memory <total> <used> in bytes (answered in MB), health <n> (default 0), hbm_ecc <enable_flag>
// <single_bit> <double_bit> <total_single_bit> <total_double_bit> <double_bit_isolated_pages>
// (dcmi_get_device_ecc_info for DCMI_DEVICE_TYPE_HBM; absent, or another type: NOT_SUPPORT).
// `fail` codes: the
// DCMI_ERR_CODE_ names without the prefix (DEVICE_NOT_EXIST, NOT_SUPPORT, OPER_NOT_PERMITTED,
// NOT_REDAY, INNER_ERR, ...) or negative numbers.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "server/probe/vendor_libs/dcmi_api.h"
#include "tests/fakes/accel_fake_script.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const std::map<std::string, long long> kCodes = {
    {"INVALID_PARAMETER", DCMI_ERR_CODE_INVALID_PARAMETER}, {"OPER_NOT_PERMITTED", DCMI_ERR_CODE_OPER_NOT_PERMITTED},
    {"INNER_ERR", DCMI_ERR_CODE_INNER_ERR},                 {"TIME_OUT", DCMI_ERR_CODE_TIME_OUT},
    {"INVALID_DEVICE_ID", DCMI_ERR_CODE_INVALID_DEVICE_ID}, {"DEVICE_NOT_EXIST", DCMI_ERR_CODE_DEVICE_NOT_EXIST},
    {"IOCTL_FAIL", DCMI_ERR_CODE_IOCTL_FAIL},               {"NOT_REDAY", DCMI_ERR_CODE_NOT_REDAY},
    {"NOT_SUPPORT_IN_CONTAINER", DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER},
    {"NOT_SUPPORT", DCMI_ERR_CODE_NOT_SUPPORT},
};
const fake::Library kLibrary = {"FAKE_DCMI_CONFIG", "FAKE_DCMI_LOG", &kCodes};
constexpr unsigned long long kMiB = 1ULL << 20;

long Number(const fake::Script& s, size_t i, const char* key, long fallback) {
  return s.Has(i, key) ? std::strtol(s.Fact(i, key).c_str(), nullptr, 0) : fallback;
}
int CardOf(const fake::Script& s, size_t i) { return static_cast<int>(Number(s, i, "card", static_cast<long>(i))); }

// The script device at (card, chip), or -1.
int DeviceAt(const fake::Script& s, int card, int chip) {
  int n = 0;
  for (size_t i = 0; i < s.devices.size(); ++i) {
    if (CardOf(s, i) != card) continue;
    if (n++ == chip) return static_cast<int>(i);
  }
  return -1;
}

// Starts a call on (card, chip): sets `i` and returns 0 to go on, or the answer.
int ChipCall(int card, int chip, const char* function, int& i) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return DCMI_ERR_CODE_INNER_ERR;
  i = DeviceAt(*script, card, chip);
  if (i < 0) {
    fake::Log(kLibrary, function, "-");
    return DCMI_ERR_CODE_INVALID_DEVICE_ID;
  }
  return fake::Apply(kLibrary, script, function, std::to_string(i));
}

}  // namespace

#define FAKE_CHIP_CALL(card, chip)                                      \
  int i = -1;                                                           \
  if (const int scripted = ChipCall(card, chip, __func__, i); scripted) \
    return scripted;                                                    \
  const fake::Script& script = *fake::Current();

FAKE_EXPORT int dcmi_init(void) { return fake::Init(kLibrary, __func__, DCMI_ERR_CODE_INNER_ERR); }

FAKE_EXPORT int dcmi_get_card_num_list(int* card_num, int* card_list, int list_len) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return DCMI_ERR_CODE_INNER_ERR;
  if (const int r = fake::Apply(kLibrary, script, __func__, "-"); r != 0) return r;
  if (card_num == nullptr || card_list == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  std::set<int> seen;
  int n = 0;
  for (size_t i = 0; i < script->devices.size(); ++i) {
    const int card = CardOf(*script, i);
    if (!seen.insert(card).second) continue;
    if (n >= list_len) return DCMI_ERR_CODE_INVALID_PARAMETER;
    card_list[n++] = card;
  }
  *card_num = n;
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_num_in_card(int card_id, int* device_num) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return DCMI_ERR_CODE_INNER_ERR;
  if (const int r = fake::Apply(kLibrary, script, __func__, "-"); r != 0) return r;
  if (device_num == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  int n = 0;
  for (size_t i = 0; i < script->devices.size(); ++i) n += CardOf(*script, i) == card_id ? 1 : 0;
  if (n == 0) return DCMI_ERR_CODE_INVALID_DEVICE_ID;
  *device_num = n;
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_logic_id(int* device_logic_id, int card_id, int device_id) {
  FAKE_CHIP_CALL(card_id, device_id)
  if (device_logic_id == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  *device_logic_id = static_cast<int>(Number(script, i, "logic_id", i));
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int* phyid) {
  const fake::Script* script = fake::Current();
  if (script == nullptr) return DCMI_ERR_CODE_INNER_ERR;
  for (size_t i = 0; i < script->devices.size(); ++i) {
    if (Number(*script, i, "logic_id", static_cast<long>(i)) != static_cast<long>(logicid)) continue;
    if (const int r = fake::Apply(kLibrary, script, __func__, std::to_string(i)); r != 0) return r;
    if (phyid == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
    *phyid = static_cast<unsigned int>(Number(*script, i, "phy_id", static_cast<long>(i)));
    return DCMI_OK;
  }
  fake::Log(kLibrary, __func__, "-");
  return DCMI_ERR_CODE_INVALID_DEVICE_ID;
}

FAKE_EXPORT int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all* pcie_info) {
  FAKE_CHIP_CALL(card_id, device_id)
  if (pcie_info == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  *pcie_info = dcmi_pcie_info_all{};
  unsigned int domain = 0, bus = 0, dev = 0, fn = 0;
  std::sscanf(script.Fact(i, "bus_id").c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn);
  pcie_info->venderid = 0x19e5;
  pcie_info->deviceid = 0xd802;
  pcie_info->domain = static_cast<int>(domain);
  pcie_info->bdf_busid = bus;
  pcie_info->bdf_deviceid = dev;
  pcie_info->bdf_funcid = fn;
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info* chip_info) {
  FAKE_CHIP_CALL(card_id, device_id)
  if (chip_info == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  *chip_info = dcmi_chip_info{};
  std::snprintf(reinterpret_cast<char*>(chip_info->chip_type), sizeof chip_info->chip_type, "Ascend");
  std::snprintf(reinterpret_cast<char*>(chip_info->chip_name), sizeof chip_info->chip_name, "%s",
                script.Fact(i, "name").c_str());
  std::snprintf(reinterpret_cast<char*>(chip_info->chip_ver), sizeof chip_info->chip_ver, "V1");
  chip_info->aicore_cnt = static_cast<unsigned int>(Number(script, i, "aicore", 0));
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type input_type,
                                       struct dcmi_die_id* die_id) {
  FAKE_CHIP_CALL(card_id, device_id)
  if (die_id == nullptr || input_type != VDIE) return DCMI_ERR_CODE_INVALID_PARAMETER;
  if (!script.Has(i, "vdie")) return DCMI_ERR_CODE_NOT_SUPPORT;
  *die_id = dcmi_die_id{};
  std::sscanf(script.Fact(i, "vdie").c_str(), "%x %x %x %x %x", &die_id->soc_die[0], &die_id->soc_die[1],
              &die_id->soc_die[2], &die_id->soc_die[3], &die_id->soc_die[4]);
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info* hbm_info) {
  FAKE_CHIP_CALL(card_id, device_id)
  if (hbm_info == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  unsigned long long total = 0, used = 0;
  if (std::sscanf(script.Fact(i, "memory").c_str(), "%llu %llu", &total, &used) != 2) return DCMI_ERR_CODE_NOT_SUPPORT;
  *hbm_info = dcmi_hbm_info{};
  hbm_info->memory_size = total / kMiB;
  hbm_info->memory_usage = used / kMiB;
  hbm_info->freq = 1600;
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_health(int card_id, int device_id, unsigned int* health) {
  FAKE_CHIP_CALL(card_id, device_id)
  if (health == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  *health = static_cast<unsigned int>(std::strtoul(script.Has(i, "health") ? script.Fact(i, "health").c_str() : "0",
                                                   nullptr, 0));
  return DCMI_OK;
}

FAKE_EXPORT int dcmi_get_device_ecc_info(int card_id, int device_id, enum dcmi_device_type input_type,
                                         struct dcmi_ecc_info* device_ecc_info) {
  FAKE_CHIP_CALL(card_id, device_id)
  if (device_ecc_info == nullptr) return DCMI_ERR_CODE_INVALID_PARAMETER;
  dcmi_ecc_info ecc = {};
  if (input_type != DCMI_DEVICE_TYPE_HBM ||
      std::sscanf(script.Fact(i, "hbm_ecc").c_str(), "%d %u %u %u %u %u", &ecc.enable_flag, &ecc.single_bit_error_cnt,
                  &ecc.double_bit_error_cnt, &ecc.total_single_bit_error_cnt, &ecc.total_double_bit_error_cnt,
                  &ecc.double_bit_isolated_pages_cnt) != 6) {
    return DCMI_ERR_CODE_NOT_SUPPORT;
  }
  *device_ecc_info = ecc;
  return DCMI_OK;
}
