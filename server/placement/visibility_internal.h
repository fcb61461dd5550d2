// Visibility's insides, shared by its files: visibility.h is the interface, and nothing outside
// server/placement includes this header. visibility.cc holds the steps every row takes and hands
// each row to its mask rules, one file per family of rows (visibility.cc's opening comment lists
// them); these are the helpers they share and the entry point of each family.
#ifndef DEVPLACE_SERVER_PLACEMENT_VISIBILITY_INTERNAL_H_
#define DEVPLACE_SERVER_PLACEMENT_VISIBILITY_INTERNAL_H_

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "devplace/v1/devplace.pb.h"
#include "server/placement/visibility.h"

namespace devplace::placement::visibility_internal {

// visibility.cc: the helpers, each described where it is defined.
const std::string* Get(const Env& env, const std::string& name);
std::string UnitList(const std::vector<VisibleUnit>& units, absl::string_view type);
absl::Status BadMask(absl::string_view var, absl::string_view value, absl::string_view what,
                     absl::string_view accepted);
void MarkMasked(RowVisibility& out, absl::string_view var, const std::string& value);
int SubDevices(const v1::Device& d);

// The mask rules of each family: each narrows and renumbers `units` (the row's devices as the job
// would number them without masks) by the variables in `env`, recording its steps in `out`.

// visibility_cuda_style.cc: a CUDA-style list (`outer_var`: see the definition), and the rows
// masked by one (MLU, MUSA, SDAA).
absl::Status ApplyCudaStyle(absl::string_view var, const std::string& value,
                            std::vector<VisibleUnit>& units, RowVisibility& out,
                            absl::string_view outer_var = "");
absl::Status MaskCudaLike(const Env& env, absl::string_view rule, std::initializer_list<const char*> vars,
                          absl::string_view type, std::vector<VisibleUnit>& units, RowVisibility& out);

// visibility_cuda_rocm.cc
absl::Status MaskNvidia(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out);
absl::Status MaskAmd(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out);

// visibility_level_zero.cc: `cards` are the root devices before tiles; `flat`, ZE_FLAT_DEVICE_HIERARCHY.
absl::Status MaskXpu(const Env& env, const std::vector<VisibleUnit>& cards, bool flat,
                     std::vector<VisibleUnit>& units, RowVisibility& out);

// visibility_ascend.cc
absl::Status MaskNpu(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out);

// visibility_neuron.cc
absl::Status MaskNeuron(const Env& env, std::vector<VisibleUnit>& units, RowVisibility& out);

// visibility_gaudi_tpu.cc: HABANA_VISIBLE_MODULES (id_of = ModuleId) and TPU_VISIBLE_CHIPS.
absl::Status MaskById(const Env& env, absl::string_view rule, const char* var, absl::string_view what,
                      const std::function<int(const v1::Device&)>& id_of, const v1::Backend& backend,
                      std::vector<VisibleUnit>& units, RowVisibility& out);
int ModuleId(const v1::Device& d);

}  // namespace devplace::placement::visibility_internal

#endif  // DEVPLACE_SERVER_PLACEMENT_VISIBILITY_INTERNAL_H_
