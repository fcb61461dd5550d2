// The CNDev C API's public declarations (cndev.h of Cambricon's CNDev library, shipped with the
// Cambricon Neuware SDK / MLU driver 5.x-6.x and in Cambricon's Apache-2.0
// cambricon-k8s-device-plugin, API version CNDEV_VERSION_5) for the few types, constants and
// functions devplace calls. Declared here so that building devplace needs no Cambricon header or
// library: libcndev.so is loaded with dlopen at run time (server/probe/vendor_libs/cndev_prober.cc). The fake
// CNDev of the tests (tests/fakes/fake_cndev.cc) defines the same functions from these
// declarations.
//
// Every struct starts with `version`, which the caller sets to the API version it was written
// against; the library answers CNDEV_ERROR_UNSUPPORTED_API_VERSION when it cannot serve it.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CNDEV_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CNDEV_API_H_

#include <cstdint>

extern "C" {

#define CNDEV_VERSION_5 5
#define CNDEV_UUID_SIZE 37

typedef enum {
  CNDEV_SUCCESS = 0,
  CNDEV_ERROR_NO_DRIVER = 1,
  CNDEV_ERROR_LOW_DRIVER_VERSION = 2,
  CNDEV_ERROR_UNSUPPORTED_API_VERSION = 3,
  CNDEV_ERROR_UNINITIALIZED = 4,
  CNDEV_ERROR_INVALID_ARGUMENT = 5,
  CNDEV_ERROR_INVALID_DEVICE_ID = 6,
  CNDEV_ERROR_UNKNOWN = 7,
  CNDEV_ERROR_MALLOC = 8,
  CNDEV_ERROR_INSUFFICIENT_SPACE = 9,
  CNDEV_ERROR_NOT_SUPPORTED = 10,
  CNDEV_ERROR_INVALID_LINK = 11,
  CNDEV_ERROR_NO_DEVICES = 12,
  CNDEV_ERROR_NO_PERMISSION = 13,
  CNDEV_ERROR_NOT_FOUND = 14,
  CNDEV_ERROR_IN_USE = 15,
  CNDEV_ERROR_DUPLICATE = 16,
  CNDEV_ERROR_TIMEOUT = 17,
} cndevRet_t;

// A device handle (an int in CNDev).
typedef int32_t cndevDevice_t;

typedef struct {
  int version;
  unsigned number;  // devices
} cndevCardInfo_t;

typedef struct {
  int version;
  unsigned int subsystemId;
  unsigned int deviceId;
  uint16_t vendor;
  uint16_t subsystemVendor;
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int function;
  const char* physicalSlot;
  int slotID;
} cndevPCIeInfo_t;

// Sizes in MB (MiB).
typedef struct {
  int version;
  int64_t physicalMemoryTotal;
  int64_t physicalMemoryUsed;
  int64_t virtualMemoryTotal;
  int64_t virtualMemoryUsed;
  int64_t channelNumber;
  int64_t channelMemoryUsed[20];
  uint64_t globalMemory;
} cndevMemoryInfo_t;

typedef struct {
  int version;
  uint8_t uuid[CNDEV_UUID_SIZE];  // NUL-terminated, up to 36 characters
  uint64_t ncsUUID64;
} cndevUUID_t;

// health: 1 healthy, 0 not. deviceState: CNDEV_HEALTH_STATE_DEVICE_IN_PROBLEM 0, _GOOD 1.
// driverState: 0 early init .. 4 running, 5 boot error, 6 reset, 7 reset error, 8 unknown.
typedef struct {
  int version;
  int health;
  int deviceState;
  int driverState;
} cndevCardHealthState_t;

// One process on a device (cndevGetProcessInfo); memory in KiB.
typedef struct {
  int version;
  unsigned int pid;
  uint64_t physicalMemoryUsed;
  uint64_t virtualMemoryUsed;
} cndevProcessInfo_t;

cndevRet_t cndevInit(int reserved);
cndevRet_t cndevRelease(void);
const char* cndevGetErrorString(cndevRet_t errorId);
cndevRet_t cndevGetDeviceCount(cndevCardInfo_t* cardNum);
cndevRet_t cndevGetDeviceHandleByIndex(int index, cndevDevice_t* handle);
cndevRet_t cndevGetPCIeInfo(cndevPCIeInfo_t* deviceInfo, cndevDevice_t device);
const char* cndevGetCardNameStringByDevId(cndevDevice_t device);
cndevRet_t cndevGetUUID(cndevUUID_t* uuidInfo, cndevDevice_t device);
cndevRet_t cndevGetMemoryUsage(cndevMemoryInfo_t* memInfo, cndevDevice_t device);
cndevRet_t cndevGetCardHealthState(cndevCardHealthState_t* cardHealthState, cndevDevice_t device);
// *infoCount in: the capacity of procInfo (whose first entry carries the version); out: the
// number of processes. CNDEV_ERROR_INSUFFICIENT_SPACE (with the count) when they do not fit.
cndevRet_t cndevGetProcessInfo(unsigned* infoCount, cndevProcessInfo_t* procInfo, cndevDevice_t device);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_CNDEV_API_H_
