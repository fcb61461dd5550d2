// Fluent ResolveDeviceRequest construction for the resolver tests.
#ifndef DEVPLACE_TESTS_PLACEMENT_REQUEST_BUILDER_H_
#define DEVPLACE_TESTS_PLACEMENT_REQUEST_BUILDER_H_

#include <initializer_list>
#include <string>
#include <utility>

#include "devplace/v1/devplace.pb.h"

namespace devplace::testing {

class Req {
 public:
  static Req Train(v1::Convention c = v1::CONVENTION_TRAINING_ARGUMENTS) {
    Req r;
    r.r_.set_workload(v1::WORKLOAD_TRAINING);
    r.r_.set_convention(c);
    return r;
  }
  static Req Infer(const std::string& device_map = "", v1::Convention c = v1::CONVENTION_FROM_PRETRAINED) {
    Req r;
    r.r_.set_workload(v1::WORKLOAD_INFERENCE);
    r.r_.set_convention(c);
    r.r_.set_device_map(device_map);
    return r;
  }
  static Req Pipe(const std::string& device = "") { return Infer(device, v1::CONVENTION_PIPELINE); }

  Req& Rank(int local_rank, int world_size) {
    r_.set_local_rank(local_rank);
    r_.set_world_size(world_size);
    return *this;
  }
  Req& Env(const std::string& k, const std::string& v) {
    (*r_.mutable_env())[k] = v;
    return *this;
  }
  Req& UseCpu() { r_.set_use_cpu(true); return *this; }
  Req& Strict() { r_.set_strict(true); return *this; }
  Req& Runtime(std::initializer_list<const char*> backends) {
    for (const char* b : backends) r_.add_runtime_backends(b);
    return *this;
  }
  Req& JobNodes(std::initializer_list<const char*> nodes) {
    r_.mutable_job_devices();
    for (const char* n : nodes) r_.mutable_job_devices()->add_device_nodes(n);
    return *this;
  }
  Req& ModelSize(uint64_t bytes) { r_.set_model_size_bytes(bytes); return *this; }
  Req& Transformers(const std::string& v) { r_.set_transformers_version(v); return *this; }
  Req& Accelerate(const std::string& v) { r_.set_accelerate_version(v); return *this; }
  // job_environment read at `source`, listing these packages (name, version).
  Req& JobPackages(const std::string& source,
                   std::initializer_list<std::pair<const char*, const char*>> packages) {
    r_.mutable_job_environment()->set_source(source);
    for (const auto& [name, version] : packages) {
      v1::PythonPackage* p = r_.mutable_job_environment()->add_packages();
      p->set_name(name);
      p->set_version(version);
    }
    return *this;
  }
  const v1::ResolveDeviceRequest& proto() const { return r_; }
  operator const v1::ResolveDeviceRequest&() const { return r_; }

 private:
  v1::ResolveDeviceRequest r_;
};

}  // namespace devplace::testing

#endif  // DEVPLACE_TESTS_PLACEMENT_REQUEST_BUILDER_H_
