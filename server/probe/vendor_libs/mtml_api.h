// The MTML C API's public declarations (mtml.h of the Moore Threads Management Library, MTML
// 1.x-2.x as shipped with the MUSA driver and documented in its "MTML API Reference"; the 2.2.0
// header is mirrored in the mthreads-ml-py bindings) for the few types, constants and functions
// devplace calls. Declared here so that building devplace needs no Moore Threads header or
// library: libmtml.so is loaded with dlopen at run time (server/probe/vendor_libs/mtml_prober.cc). The fake
// MTML of the tests (tests/fakes/fake_mtml.cc) defines the same functions from these
// declarations.
//
// MTML works with opaque objects: a library object from mtmlLibraryInit, device objects from it,
// and memory objects from a device.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_MTML_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_MTML_API_H_

extern "C" {

typedef enum {
  MTML_SUCCESS = 0,
  MTML_ERROR_DRIVER_NOT_LOADED,
  MTML_ERROR_DRIVER_FAILURE,  // access to the driver failed (for one device: the device fails)
  MTML_ERROR_INVALID_ARGUMENT,
  MTML_ERROR_NOT_SUPPORTED,
  MTML_ERROR_NO_PERMISSION,
  MTML_ERROR_INSUFFICIENT_SIZE,
  MTML_ERROR_NOT_FOUND,
  MTML_ERROR_INSUFFICIENT_MEMORY,
  MTML_ERROR_DRIVER_TOO_OLD,
  MTML_ERROR_DRIVER_TOO_NEW,
  MTML_ERROR_TIMEOUT,
  MTML_ERROR_RESOURCE_IS_BUSY,
  MTML_ERROR_UNKNOWN = 999,
} MtmlReturn;

#define MTML_DEVICE_PCI_SBDF_BUFFER_SIZE 32
#define MTML_DEVICE_NAME_BUFFER_SIZE 32
#define MTML_DEVICE_UUID_BUFFER_SIZE 48

typedef struct MtmlLibrary MtmlLibrary;
typedef struct MtmlDevice MtmlDevice;
typedef struct MtmlMemory MtmlMemory;

// PCI information (mtmlDeviceGetPciInfo). `sbdf` is "segment:bus:device.function".
typedef struct {
  char sbdf[MTML_DEVICE_PCI_SBDF_BUFFER_SIZE];
  unsigned int segment;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubsystemId;
  unsigned int busWidth;
  float pciMaxSpeed;
  float pciCurSpeed;
  unsigned int pciMaxWidth;
  unsigned int pciCurWidth;
  unsigned int pciMaxGen;
  unsigned int pciCurGen;
  int rsvd[6];
} MtmlPciInfo;

MtmlReturn mtmlLibraryInit(MtmlLibrary** lib);
MtmlReturn mtmlLibraryShutDown(MtmlLibrary* lib);
MtmlReturn mtmlLibraryCountDevice(const MtmlLibrary* lib, unsigned int* count);
MtmlReturn mtmlLibraryInitDeviceByIndex(const MtmlLibrary* lib, unsigned int index, MtmlDevice** dev);
MtmlReturn mtmlDeviceGetPciInfo(const MtmlDevice* dev, MtmlPciInfo* pci);
MtmlReturn mtmlDeviceGetName(const MtmlDevice* dev, char* name, unsigned int length);
MtmlReturn mtmlDeviceGetUUID(const MtmlDevice* dev, char* uuid, unsigned int length);
MtmlReturn mtmlDeviceInitMemory(const MtmlDevice* dev, MtmlMemory** mem);
// Bytes.
MtmlReturn mtmlMemoryGetTotal(const MtmlMemory* mem, unsigned long long* total);
MtmlReturn mtmlMemoryGetUsed(const MtmlMemory* mem, unsigned long long* used);

// Memory health (MTML 1.x-2.x; the header: "For PINGHU or newer fully supported devices. Requires
// ECC Mode to be enabled"; older devices answer MTML_ERROR_NOT_SUPPORTED).
typedef enum { MTML_MEMORY_ECC_DISABLE = 0, MTML_MEMORY_ECC_ENABLE } MtmlEccMode;
// Volatile counts are reset each time the driver loads; aggregate counts persist (the device's life).
typedef enum { MTML_VOLATILE_ECC = 0, MTML_AGGREGATE_ECC = 1 } MtmlEccCounterType;
// Corrected: single-bit errors; uncorrected: double-bit errors.
typedef enum { MTML_MEMORY_ERROR_TYPE_CORRECTED = 0, MTML_MEMORY_ERROR_TYPE_UNCORRECTED = 1 } MtmlMemoryErrorType;
typedef enum { MTML_MEMORY_LOCATION_DRAM = 0x1 } MtmlMemoryLocation;
// Pages awaiting retirement, which needs a reboot to complete.
typedef enum {
  MTML_RETIRED_PAGES_PENDING_STATE_FALSE = 0,
  MTML_RETIRED_PAGES_PENDING_STATE_TRUE = 1
} MtmlRetiredPagesPendingState;

MtmlReturn mtmlMemoryGetEccMode(const MtmlMemory* mem, MtmlEccMode* currentMode, MtmlEccMode* pendingMode);
MtmlReturn mtmlMemoryGetEccErrorCounter(const MtmlMemory* mem, MtmlMemoryErrorType errorType,
                                        MtmlEccCounterType counterType, MtmlMemoryLocation locationType,
                                        unsigned long long* eccCounts);
MtmlReturn mtmlMemoryGetRetiredPagesPendingStatus(const MtmlMemory* mem, MtmlRetiredPagesPendingState* isPending);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_MTML_API_H_
