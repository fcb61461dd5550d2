// The part of the oneAPI Level Zero Sysman API (libze_loader.so.1) that devplace uses, declared
// here so that nothing Intel is needed at build time (the loader is opened with dlopen). Names,
// values and layouts follow the public headers level_zero/ze_api.h and level_zero/zes_api.h of the
// Level Zero specification 1.5 and later (github.com/oneapi-src/level-zero); zesInit exists since
// 1.5, so devplace needs no zeInit and no ZES_ENABLE_SYSMAN. A loader without zesInit (older than
// Sysman 1.5, e.g. Debian 12's libze1 1.8) is read through the core API instead (zeInit,
// zeDriverGet, zeDeviceGet, zeDeviceGetProperties, zeDevicePciGetPropertiesExt, declared at the
// end).
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LEVEL_ZERO_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LEVEL_ZERO_API_H_

#include <cstdint>

extern "C" {

// ze_result_t: the values devplace tells apart.
typedef enum {
  ZE_RESULT_SUCCESS = 0,
  ZE_RESULT_ERROR_DEVICE_LOST = 0x70000001,
  ZE_RESULT_ERROR_INSUFFICIENT_PERMISSIONS = 0x70010000,
  ZE_RESULT_ERROR_NOT_AVAILABLE = 0x70010001,
  ZE_RESULT_ERROR_DEPENDENCY_UNAVAILABLE = 0x70020000,
  ZE_RESULT_ERROR_UNINITIALIZED = 0x78000001,
  ZE_RESULT_ERROR_UNSUPPORTED_VERSION = 0x78000002,
  ZE_RESULT_ERROR_UNSUPPORTED_FEATURE = 0x78000003,
  ZE_RESULT_ERROR_INVALID_ARGUMENT = 0x78000004,
  ZE_RESULT_ERROR_UNKNOWN = 0x7ffffffe,
} ze_result_t;

typedef uint8_t ze_bool_t;
typedef struct _zes_driver_handle_t* zes_driver_handle_t;
typedef struct _zes_device_handle_t* zes_device_handle_t;
typedef struct _zes_mem_handle_t* zes_mem_handle_t;

// zes_structure_type_t values of the structures devplace passes.
#define ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES 0x1
#define ZES_STRUCTURE_TYPE_PCI_PROPERTIES 0x2
#define ZES_STRUCTURE_TYPE_MEM_PROPERTIES 0xb
#define ZES_STRUCTURE_TYPE_MEM_STATE 0x1e
#define ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES 0x3

#define ZE_MAX_DEVICE_NAME 256
#define ZE_MAX_DEVICE_UUID_SIZE 16
#define ZES_STRING_PROPERTY_SIZE 64

typedef struct {
  uint32_t stype;  // ze_structure_type_t
  void* pNext;
  uint32_t type;  // ze_device_type_t: 1 GPU
  uint32_t vendorId;
  uint32_t deviceId;
  uint32_t flags;  // ze_device_property_flags_t: bit 0 integrated, bit 1 sub-device
  uint32_t subdeviceId;
  uint32_t coreClockRate;
  uint64_t maxMemAllocSize;
  uint32_t maxHardwareContexts;
  uint32_t maxCommandQueuePriority;
  uint32_t numThreadsPerEU;
  uint32_t physicalEUSimdWidth;
  uint32_t numEUsPerSubslice;
  uint32_t numSubslicesPerSlice;
  uint32_t numSlices;
  uint64_t timerResolution;
  uint32_t timestampValidBits;
  uint32_t kernelTimestampValidBits;
  uint8_t uuid[ZE_MAX_DEVICE_UUID_SIZE];  // ze_device_uuid_t
  char name[ZE_MAX_DEVICE_NAME];
} ze_device_properties_t;

typedef struct {
  uint32_t stype;  // ZES_STRUCTURE_TYPE_DEVICE_PROPERTIES
  void* pNext;
  ze_device_properties_t core;
  uint32_t numSubdevices;  // tiles; 0 for a single-tile device
  char serialNumber[ZES_STRING_PROPERTY_SIZE];
  char boardNumber[ZES_STRING_PROPERTY_SIZE];
  char brandName[ZES_STRING_PROPERTY_SIZE];
  char modelName[ZES_STRING_PROPERTY_SIZE];
  char vendorName[ZES_STRING_PROPERTY_SIZE];
  char driverVersion[ZES_STRING_PROPERTY_SIZE];
} zes_device_properties_t;

typedef struct {
  uint32_t stype;  // ZES_STRUCTURE_TYPE_PCI_PROPERTIES
  void* pNext;
  uint32_t domain, bus, device, function;  // zes_pci_address_t
  int32_t gen, width;                      // zes_pci_speed_t
  int64_t maxBandwidth;
  ze_bool_t haveBandwidthCounters, havePacketCounters, haveReplayCounters;
} zes_pci_properties_t;

// zes_mem_loc_t: ZES_MEM_LOC_DEVICE.
#define ZES_MEM_LOC_DEVICE 1

typedef struct {
  uint32_t stype;  // ZES_STRUCTURE_TYPE_MEM_PROPERTIES
  void* pNext;
  uint32_t type;  // zes_mem_type_t
  ze_bool_t onSubdevice;
  uint32_t subdeviceId;
  uint32_t location;  // zes_mem_loc_t
  uint64_t physicalSize;  // bytes; 0 when unknown
  int32_t busWidth;
  int32_t numChannels;
} zes_mem_properties_t;

// zes_mem_health_t.
typedef enum {
  ZES_MEM_HEALTH_UNKNOWN = 0,
  ZES_MEM_HEALTH_OK = 1,
  ZES_MEM_HEALTH_DEGRADED = 2,
  ZES_MEM_HEALTH_CRITICAL = 3,
  ZES_MEM_HEALTH_REPLACE = 4,
} zes_mem_health_t;

typedef struct {
  uint32_t stype;  // ZES_STRUCTURE_TYPE_MEM_STATE
  const void* pNext;
  uint32_t health;  // zes_mem_health_t
  uint64_t free;    // bytes
  uint64_t size;    // bytes
} zes_mem_state_t;

// zes_process_state_t (zesDeviceProcessesGetState), unchanged since Level Zero 1.0: one process
// using the device, its device memory and shared memory in bytes.
#define ZES_STRUCTURE_TYPE_PROCESS_STATE 0x16
typedef struct {
  uint32_t stype;  // ZES_STRUCTURE_TYPE_PROCESS_STATE
  const void* pNext;
  uint32_t processId;
  uint64_t memSize;
  uint64_t sharedSize;
  uint32_t engines;  // zes_engine_type_flags_t
} zes_process_state_t;

ze_result_t zesInit(uint32_t flags);
ze_result_t zesDriverGet(uint32_t* pCount, zes_driver_handle_t* phDrivers);
ze_result_t zesDeviceGet(zes_driver_handle_t hDriver, uint32_t* pCount, zes_device_handle_t* phDevices);
ze_result_t zesDeviceGetProperties(zes_device_handle_t hDevice, zes_device_properties_t* pProperties);
ze_result_t zesDevicePciGetProperties(zes_device_handle_t hDevice, zes_pci_properties_t* pProperties);
ze_result_t zesDeviceEnumMemoryModules(zes_device_handle_t hDevice, uint32_t* pCount, zes_mem_handle_t* phMemory);
ze_result_t zesMemoryGetProperties(zes_mem_handle_t hMemory, zes_mem_properties_t* pProperties);
ze_result_t zesMemoryGetState(zes_mem_handle_t hMemory, zes_mem_state_t* pState);
// The processes using the device: *pCount in (capacity; 0 asks for the count), out (the count).
ze_result_t zesDeviceProcessesGetState(zes_device_handle_t hDevice, uint32_t* pCount,
                                       zes_process_state_t* pProcesses);

// ---- the core API, for loaders without Sysman 1.5 ----
typedef struct _ze_driver_handle_t* ze_driver_handle_t;
typedef struct _ze_device_handle_t* ze_device_handle_t;

// ze_init_flags_t: ZE_INIT_FLAG_GPU_ONLY.
#define ZE_INIT_FLAG_GPU_ONLY 0x1
// ze_structure_type_t of ze_pci_ext_properties_t (ZE_extension_pci_properties, API 1.3).
#define ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES 0x10008

typedef struct {
  uint32_t stype;  // ZE_STRUCTURE_TYPE_PCI_EXT_PROPERTIES
  void* pNext;
  uint32_t domain, bus, device, function;  // ze_pci_address_ext_t
  int32_t genVersion, width;               // ze_pci_speed_ext_t
  int64_t maxBandwidth;
} ze_pci_ext_properties_t;

ze_result_t zeInit(uint32_t flags);
ze_result_t zeDriverGet(uint32_t* pCount, ze_driver_handle_t* phDrivers);
ze_result_t zeDeviceGet(ze_driver_handle_t hDriver, uint32_t* pCount, ze_device_handle_t* phDevices);
// `pDeviceProperties->stype` must be ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES.
ze_result_t zeDeviceGetProperties(ze_device_handle_t hDevice, ze_device_properties_t* pDeviceProperties);
ze_result_t zeDevicePciGetPropertiesExt(ze_device_handle_t hDevice, ze_pci_ext_properties_t* pPciProperties);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_LEVEL_ZERO_API_H_
