// The NVML C API's public declarations (nvml.h of the NVIDIA Management Library) for the few
// types, constants and functions devplace calls. They are declared here, faithfully to the
// library's public ABI, so that building devplace needs no NVIDIA header or library:
// libnvidia-ml.so.1 is loaded with dlopen at run time (server/probe/vendor_libs/nvml_prober.cc) and the
// functions are looked up by name with dlsym. The fake NVML for the tests
// (tests/fakes/fake_nvml.cc) defines the same functions from these declarations.
//
// Only the global namespace and C linkage are used, as in nvml.h; do not include this header
// next to the real nvml.h.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_API_H_

extern "C" {

// Return codes (nvmlReturn_t). Only those devplace tells apart are named; every other value is
// printed as a number.
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

// An opaque device handle (a physical GPU or a MIG device).
typedef struct nvmlDevice_st* nvmlDevice_t;

// Buffer sizes for the string getters.
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

// nvmlDeviceGetMigMode's modes.
#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1

// PCI information (the layout nvmlDeviceGetPciInfo_v3 fills). `busId` is printed as
// "%08X:%02X:%02X.0" (8-digit upper-case domain), `busIdLegacy` as "%04X:%02X:%02X.0".
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;     // combined 16-bit device id and 16-bit vendor id
  unsigned int pciSubSystemId;  // combined 16-bit subsystem device id and vendor id
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

// Device memory in bytes (nvmlDeviceGetMemoryInfo).
typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

// One process on a device (nvmlProcessInfo_v2_t, the layout the _v3 process queries fill since
// driver 510): `usedGpuMemory` is NVML_VALUE_NOT_AVAILABLE when NVML cannot tell (e.g. a process in
// a pid namespace it cannot see, some MIG configurations); the instance ids are
// NVML_INVALID_INSTANCE_ID (0xFFFFFFFF) unless MIG is on.
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

#define NVML_VALUE_NOT_AVAILABLE (~0ULL)
#define NVML_INVALID_INSTANCE_ID 0xFFFFFFFFu

// nvmlComputeMode_t.
#define NVML_COMPUTEMODE_DEFAULT 0
#define NVML_COMPUTEMODE_EXCLUSIVE_THREAD 1  // deprecated; reported as exclusive-process
#define NVML_COMPUTEMODE_PROHIBITED 2
#define NVML_COMPUTEMODE_EXCLUSIVE_PROCESS 3

// Library lifetime.
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);

// System queries. The CUDA driver version is 1000 * major + 10 * minor (12040 = 12.4); it needs
// libcuda.so.1 (NVML_ERROR_LIBRARY_NOT_FOUND without it).
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion);

// Devices. nvmlDeviceGetCount_v2 counts devices the caller may not be allowed to open
// (nvmlDeviceGetHandleByIndex_v2 then says NVML_ERROR_NO_PERMISSION).
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);

// Usage. The process queries take the list's capacity in *infoCount and set it to the number of
// processes; a list too small (or null with 0) answers NVML_ERROR_INSUFFICIENT_SIZE with the count.
// On a MIG-enabled GPU's own handle they list the processes of every instance, each with its GPU
// and compute instance ids.
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_t* infos);
// `mode` is an nvmlComputeMode_t, an enum: int-sized, the NVML_COMPUTEMODE_* values above.
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, int* mode);

// MIG. A MIG device handle answers GetUUID ("MIG-..."), GetName ("<GPU name> MIG 1g.10gb") and
// GetMemoryInfo for its own instance; GetMigDeviceHandleByIndex says NVML_ERROR_NOT_FOUND for an
// empty slot.
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t* migDevice);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id);

// Health (docs/PROBE.md "Device health"). nvmlMemoryErrorType_t and nvmlEccCounterType_t select
// what nvmlDeviceGetTotalEccErrors counts: corrected (single-bit) or uncorrected (double-bit)
// errors, since the driver last loaded (volatile) or over the GPU's life (aggregate, kept in its
// InfoROM). The call answers NVML_ERROR_NOT_SUPPORTED when ECC is off or the GPU has none.
typedef enum nvmlMemoryErrorType_enum {
  NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
} nvmlMemoryErrorType_t;
typedef enum nvmlEccCounterType_enum {
  NVML_VOLATILE_ECC = 0,
  NVML_AGGREGATE_ECC = 1,
} nvmlEccCounterType_t;
typedef enum nvmlEnableState_enum {
  NVML_FEATURE_DISABLED = 0,
  NVML_FEATURE_ENABLED = 1,
} nvmlEnableState_t;

// The clocks-event (formerly clocks-throttle) reasons, a bit mask (nvml.h's
// nvmlClocksEventReason* / nvmlClocksThrottleReason* values; the two names share each bit).
#define nvmlClocksEventReasonGpuIdle 0x0000000000000001ULL
#define nvmlClocksEventReasonApplicationsClocksSetting 0x0000000000000002ULL
#define nvmlClocksEventReasonSwPowerCap 0x0000000000000004ULL
#define nvmlClocksThrottleReasonHwSlowdown 0x0000000000000008ULL
#define nvmlClocksEventReasonSyncBoost 0x0000000000000010ULL
#define nvmlClocksEventReasonSwThermalSlowdown 0x0000000000000020ULL
#define nvmlClocksThrottleReasonHwThermalSlowdown 0x0000000000000040ULL
#define nvmlClocksThrottleReasonHwPowerBrakeSlowdown 0x0000000000000080ULL
#define nvmlClocksEventReasonDisplayClockSetting 0x0000000000000100ULL

// Every one answers NVML_ERROR_NOT_SUPPORTED on a GPU without the feature: retired pages are
// Kepler to Volta (GPUs since Ampere remap rows instead), remapped rows Ampere and newer (and not
// on a MIG-enabled GPU with active instances).
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long* eccCounts);
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t* isPending);
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrRows, unsigned int* uncRows,
                                       unsigned int* isPending, unsigned int* failureOccurred);
// The current reasons, a mask of the bits above. The Event name is the newer one, the Throttle
// name the older, deprecated one (driver 535's library exports both).
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long* clocksEventReasons);
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long* clocksThrottleReasons);

// Events (nvml.h's event API): the XID watcher (devplace-probe --watch_xid, nvml_xid_watch.h)
// registers the critical-XID event on each GPU and waits on the set. eventData is the XID number.
typedef struct nvmlEventSet_st* nvmlEventSet_t;
#define nvmlEventTypeXidCriticalError 0x0000000000000008ULL
typedef struct nvmlEventData_st {
  nvmlDevice_t device;            // the GPU (or MIG device) the event is about
  unsigned long long eventType;   // one nvmlEventType* bit
  unsigned long long eventData;   // for nvmlEventTypeXidCriticalError: the XID
  unsigned int gpuInstanceId;     // MIG instance ids, 0xFFFFFFFF when none
  unsigned int computeInstanceId;
} nvmlEventData_t;
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set);
// The event types the GPU can report, a mask of nvmlEventType* bits.
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes);
// NVML_ERROR_NOT_SUPPORTED when the GPU cannot report one of `eventTypes`.
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set);
// Waits at most `timeoutms` for an event: NVML_SUCCESS with *data filled, NVML_ERROR_TIMEOUT when
// none came; NVML_ERROR_GPU_IS_LOST when a GPU of the set fell off the bus.
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_NVML_API_H_
