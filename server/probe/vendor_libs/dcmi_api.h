// The DCMI C API's public declarations (dcmi_interface_api.h of Huawei's Ascend driver package,
// "DCMI API Reference" of the Ascend HDK 23.x/24.x for Atlas 800/900 A2 (910B); the same header
// is shipped in Ascend's ascend-docker-runtime and mind-cluster repositories) for the few types,
// constants and functions devplace calls. Declared here so that building devplace needs no
// Ascend header or library: libdcmi.so is loaded with dlopen at run time
// (server/probe/vendor_libs/dcmi_prober.cc). The fake DCMI of the tests (tests/fakes/fake_dcmi.cc) defines
// the same functions from these declarations.
//
// DCMI addresses a chip as (card_id, device_id): the cards dcmi_get_card_num_list lists, the
// chips 0..n-1 of dcmi_get_device_num_in_card. Every function returns 0 (DCMI_OK) or a negative
// error code.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_DCMI_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_DCMI_API_H_

extern "C" {

#define DCMI_OK 0
#define DCMI_ERR_CODE_INVALID_PARAMETER (-8001)
#define DCMI_ERR_CODE_OPER_NOT_PERMITTED (-8002)
#define DCMI_ERR_CODE_MEM_OPERATE_FAIL (-8003)
#define DCMI_ERR_CODE_INNER_ERR (-8005)
#define DCMI_ERR_CODE_TIME_OUT (-8006)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (-8007)
#define DCMI_ERR_CODE_DEVICE_NOT_EXIST (-8008)  // the chip is gone (or never came up)
#define DCMI_ERR_CODE_IOCTL_FAIL (-8009)
#define DCMI_ERR_CODE_NOT_REDAY (-8012)  // (sic) the driver is not ready
#define DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER (-8013)
#define DCMI_ERR_CODE_NOT_SUPPORT (-8255)

#define DCMI_MAX_CARD_NUM 64    // MAX_CARD_NUM: cards in one system
#define DCMI_MAX_CHIP_NAME_LEN 32  // MAX_CHIP_NAME_LEN
#define DCMI_DIE_ID_COUNT 5     // DIE_ID_COUNT

// dcmi_get_device_health's values: 0 normal, 1 general (minor) alarm, 2 important alarm,
// 3 urgent alarm, 0xffffffff the chip does not exist or has not started.
#define DCMI_HEALTH_OK 0
#define DCMI_HEALTH_GENERAL_ALARM 1
#define DCMI_HEALTH_NOT_EXIST 0xffffffffu

struct dcmi_chip_info {
  unsigned char chip_type[DCMI_MAX_CHIP_NAME_LEN];  // "Ascend"
  unsigned char chip_name[DCMI_MAX_CHIP_NAME_LEN];  // "910B3"
  unsigned char chip_ver[DCMI_MAX_CHIP_NAME_LEN];   // "V1"
  unsigned int aicore_cnt;
};

// dcmi_get_device_pcie_info_v2 (64 bytes).
struct dcmi_pcie_info_all {
  unsigned int venderid;
  unsigned int subvenderid;
  unsigned int deviceid;
  unsigned int subdeviceid;
  int domain;
  unsigned int bdf_busid;
  unsigned int bdf_deviceid;
  unsigned int bdf_funcid;
  unsigned char reserve[32];
};

// dcmi_get_device_hbm_info: sizes in MB (MiB).
struct dcmi_hbm_info {
  unsigned long long memory_size;   // total
  unsigned int freq;                // MHz
  unsigned long long memory_usage;  // used
  int temp;
  unsigned int bandwith_util_rate;
};

enum dcmi_die_type { NDIE, VDIE };

// dcmi_get_device_ecc_info's memory types; the reference supports DCMI_DEVICE_TYPE_HBM only.
enum dcmi_device_type {
  DCMI_DEVICE_TYPE_DDR = 0,
  DCMI_DEVICE_TYPE_SRAM = 1,
  DCMI_DEVICE_TYPE_HBM = 2,
  DCMI_DEVICE_TYPE_NPU = 3,
};

// dcmi_get_device_ecc_info (the reference: the counts are real-time data; the single- and
// double-bit counts are cleared when the system restarts, the totals cover the chip's life;
// single_bit_isolated_pages_cnt is reserved, always 0).
struct dcmi_ecc_info {
  int enable_flag;  // 1: ECC detection on, 0: off
  unsigned int single_bit_error_cnt;
  unsigned int double_bit_error_cnt;
  unsigned int total_single_bit_error_cnt;
  unsigned int total_double_bit_error_cnt;
  unsigned int single_bit_isolated_pages_cnt;
  unsigned int double_bit_isolated_pages_cnt;
};

struct dcmi_die_id {
  unsigned int soc_die[DCMI_DIE_ID_COUNT];
};

int dcmi_init(void);
int dcmi_get_card_num_list(int* card_num, int* card_list, int list_len);
int dcmi_get_device_num_in_card(int card_id, int* device_num);
int dcmi_get_device_logic_id(int* device_logic_id, int card_id, int device_id);
int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int* phyid);
int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all* pcie_info);
int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info* chip_info);
int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type input_type, struct dcmi_die_id* die_id);
int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info* hbm_info);
int dcmi_get_device_health(int card_id, int device_id, unsigned int* health);
// Health (optional: read on full probes; docs/PROBE.md "Device health", the DCMI table).
int dcmi_get_device_ecc_info(int card_id, int device_id, enum dcmi_device_type input_type,
                             struct dcmi_ecc_info* device_ecc_info);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_DCMI_API_H_
