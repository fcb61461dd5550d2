// The HLML C API's public declarations (hlml.h of the Habana Labs Management Library, as shipped
// with the Intel Gaudi driver / SynapseAI 1.x packages, MIT-licensed, and mirrored by HabanaAI's
// gohlml and pyhlml bindings) for the few types, constants and functions devplace calls. They
// are declared here, faithfully to the library's public ABI, so that building devplace needs no
// Habana header or library: libhlml.so is loaded with dlopen at run time
// (server/probe/vendor_libs/hlml_prober.cc) and the functions are looked up by name. The fake HLML of the
// tests (tests/fakes/fake_hlml.cc) defines the same functions from these declarations.
//
// Only the global namespace and C linkage are used, as in hlml.h; do not include this header next
// to the real hlml.h.
#ifndef DEVPLACE_SERVER_PROBE_VENDOR_LIBS_HLML_API_H_
#define DEVPLACE_SERVER_PROBE_VENDOR_LIBS_HLML_API_H_

extern "C" {

// Return codes (hlml_return_t). Only those devplace tells apart are named.
typedef enum hlml_return {
  HLML_SUCCESS = 0,
  HLML_ERROR_UNINITIALIZED = 1,
  HLML_ERROR_INVALID_ARGUMENT = 2,
  HLML_ERROR_NOT_SUPPORTED = 3,
  HLML_ERROR_ALREADY_INITIALIZED = 5,
  HLML_ERROR_NOT_FOUND = 6,
  HLML_ERROR_INSUFFICIENT_SIZE = 7,
  HLML_ERROR_DRIVER_NOT_LOADED = 9,
  HLML_ERROR_TIMEOUT = 10,
  HLML_ERROR_AIP_IS_LOST = 15,  // the device stopped answering (fell off the bus, reset)
  HLML_ERROR_MEMORY = 20,
  HLML_ERROR_NO_DATA = 21,
  HLML_ERROR_UNKNOWN = 49,
} hlml_return_t;

// An opaque device handle.
typedef void* hlml_device_t;

// hlml.h: PCI_DOMAIN_LEN 5, PCI_ADDR_LEN (PCI_DOMAIN_LEN + 10), PCI_LINK_INFO_LEN 10.
#define HLML_PCI_ADDR_LEN 15
#define HLML_PCI_LINK_INFO_LEN 10
// Buffer sizes devplace passes to the string getters (HLML has no named constants for them).
#define HLML_STRING_BUFFER_SIZE 256

// PCI information (hlml_device_get_pci_info). `bus_id` is "dddd:bb:dd.f".
typedef struct hlml_pci_cap {
  char link_speed[HLML_PCI_LINK_INFO_LEN];
  char link_width[HLML_PCI_LINK_INFO_LEN];
} hlml_pci_cap_t;

typedef struct hlml_pci_info {
  unsigned int bus;
  char bus_id[HLML_PCI_ADDR_LEN];
  unsigned int device;
  unsigned int domain;
  unsigned int pci_device_id;  // combined 16-bit device id and 16-bit vendor id
  hlml_pci_cap_t caps;
} hlml_pci_info_t;

// Device memory in bytes (hlml_device_get_memory_info).
typedef struct hlml_memory {
  unsigned long long free;
  unsigned long long total;
  unsigned long long used;
} hlml_memory_t;

// hlml.h's ECC types (hlml_device_get_total_ecc_errors, hlml_device_get_ecc_mode). hlml.h marks
// HLML_MEMORY_ERROR_TYPE_CORRECTED "Not supported".
typedef enum hlml_enable_state {
  HLML_FEATURE_DISABLED = 0,
  HLML_FEATURE_ENABLED = 1,
} hlml_enable_state_t;

typedef enum hlml_memory_error_type {
  HLML_MEMORY_ERROR_TYPE_CORRECTED = 0,
  HLML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
} hlml_memory_error_type_t;

typedef enum hlml_ecc_counter_type {
  HLML_VOLATILE_ECC = 0,   // since the last reset or driver load
  HLML_AGGREGATE_ECC = 1,  // over the device's life
} hlml_ecc_counter_type_t;

// Library lifetime.
hlml_return_t hlml_init(void);
hlml_return_t hlml_shutdown(void);

// System: the kernel driver's version.
hlml_return_t hlml_get_driver_version(char* driver_version, unsigned int length);

// Devices (index 0..count-1, in the driver's order).
hlml_return_t hlml_device_get_count(unsigned int* device_count);
hlml_return_t hlml_device_get_handle_by_index(unsigned int index, hlml_device_t* device);
hlml_return_t hlml_device_get_handle_by_pci_bus_id(const char* pci_addr, hlml_device_t* device);
hlml_return_t hlml_device_get_pci_info(hlml_device_t device, hlml_pci_info_t* pci);
hlml_return_t hlml_device_get_name(hlml_device_t device, char* name, unsigned int length);
hlml_return_t hlml_device_get_uuid(hlml_device_t device, char* uuid, unsigned int length);
hlml_return_t hlml_device_get_serial(hlml_device_t device, char* serial, unsigned int length);
hlml_return_t hlml_device_get_module_id(hlml_device_t device, unsigned int* module_id);
hlml_return_t hlml_device_get_memory_info(hlml_device_t device, hlml_memory_t* memory);

// Health (each optional: read on full probes; docs/PROBE.md "Device health", the HLML table).
hlml_return_t hlml_device_get_total_ecc_errors(hlml_device_t device, hlml_memory_error_type_t error_type,
                                               hlml_ecc_counter_type_t counter_type, unsigned long long* ecc_counts);
hlml_return_t hlml_device_get_ecc_mode(hlml_device_t device, hlml_enable_state_t* current, hlml_enable_state_t* pending);
hlml_return_t hlml_device_get_replaced_rows_pending_status(hlml_device_t device, hlml_enable_state_t* is_pending);

}  // extern "C"

#endif  // DEVPLACE_SERVER_PROBE_VENDOR_LIBS_HLML_API_H_
