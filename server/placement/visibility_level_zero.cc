// Intel GPUs under Level Zero (docs/SEMANTICS.md section 3): ZE_AFFINITY_MASK over root devices or tiles
// (E-XPU; ZE_FLAT_DEVICE_HIERARCHY decides which, in ComputeVisibility), the order
// ZE_ENABLE_PCI_ID_DEVICE_ORDER selects, and pinning the discrete cards past an integrated GPU
// (E-XPU-PIN).

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/placement/device_string.h"
#include "server/placement/visibility.h"
#include "server/placement/visibility_internal.h"

namespace devplace::placement::visibility_internal {

absl::Status MaskXpu(const Env& env, const std::vector<VisibleUnit>& cards, bool flat,
                     std::vector<VisibleUnit>& units, RowVisibility& out) {
  // E-ORDER (Level Zero): ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 makes the driver report devices by PCI
  // id; otherwise the order is the driver's, which devplace does not probe.
  const std::string* pci_order = Get(env, "ZE_ENABLE_PCI_ID_DEVICE_ORDER");
  const bool pci_set = pci_order != nullptr && *pci_order == "1";
  const std::string* v = Get(env, "ZE_AFFINITY_MASK");
  const bool masked = v != nullptr && !v->empty();
  std::set<std::string> models;
  for (const VisibleUnit& c : cards) models.insert(c.device->device_id());
  // E-XPU-PIN: an integrated GPU comes first in PCI bus order, so the PCI order alone points the
  // job at it; the advice is the mask of the discrete root devices, in PCI order (`units` is).
  const auto igpu = std::find_if(cards.begin(), cards.end(), [](const VisibleUnit& c) { return c.device->integrated(); });
  std::vector<std::string> pin, pinned;
  for (size_t i = 0; i < units.size(); ++i) {
    if (units[i].device->integrated()) continue;
    pin.push_back(absl::StrCat(i));
    pinned.push_back(absl::StrCat("xpu:", pinned.size(), " = ", DescribeUnit(units[i])));
  }
  const bool mixed = igpu != cards.end() && !pin.empty();
  const std::string pin_advice = absl::StrCat(
      "pin the discrete card", pin.size() > 1 ? "s" : "", " with ", pci_set ? "" : "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 ",
      "ZE_AFFINITY_MASK=", absl::StrJoin(pin, ","), " (Level Zero's root devices in PCI bus order; the job then sees ",
      absl::StrJoin(pinned, ", "), ")");
  const std::string igpu_words =
      mixed ? absl::StrCat("the integrated GPU ", DescribeUnit(*igpu),
                           igpu->device->name().empty() ? "" : absl::StrCat(" ", igpu->device->name()))
            : "";
  if (mixed && (!pci_set || !masked)) {
    out.explanation.push_back(absl::StrCat("E-XPU-PIN ", igpu_words, " is first in PCI bus order; the discrete root "
                                           "devices are ZE_AFFINITY_MASK=", absl::StrJoin(pin, ","), " in that order"));
  }
  if (mixed && !pci_set) {
    out.warnings.push_back(absl::StrCat(
        "E-XPU-PIN: visible Intel GPUs include ", igpu_words, " next to discrete ones and ZE_ENABLE_PCI_ID_DEVICE_ORDER is "
        "not 1: Level Zero's numbering then depends on the driver release (Intel compute-runtime lists discrete GPUs "
        "first in current releases, by PCI bus id in older ones)",
        masked ? absl::StrCat(", and so does what ZE_AFFINITY_MASK=", *v, " selects") : "",
        "; PCI bus order, which devplace assumes here and ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 selects, puts the integrated "
        "GPU first (xpu:0), so that variable alone points the job at the slow chip; ", pin_advice));
  } else if (mixed && pci_set && !masked) {
    out.warnings.push_back(absl::StrCat(
        "E-XPU-PIN: ZE_ENABLE_PCI_ID_DEVICE_ORDER=1 numbers Intel GPUs by PCI bus id, which puts ", igpu_words,
        " first: it is xpu:0; ", pin_advice));
  } else if (models.size() > 1 && !pci_set) {
    out.warnings.push_back(
        "visible Intel GPUs differ in model and ZE_ENABLE_PCI_ID_DEVICE_ORDER is not 1: Level Zero then reports devices "
        "in its driver's own order, which may differ from the PCI bus order used here; set "
        "ZE_ENABLE_PCI_ID_DEVICE_ORDER=1");
  }
  if (v == nullptr) return absl::OkStatus();
  if (v->empty()) {
    out.explanation.push_back("E-XPU ZE_AFFINITY_MASK is empty: Level Zero applies no filter");
    return absl::OkStatus();
  }
  MarkMasked(out, "ZE_AFFINITY_MASK", *v);
  const std::string accepted = flat
      ? "comma list of root-device ordinals (in FLAT mode each tile is a root device), e.g. 0,2"
      : "comma list of card ordinals N or tiles N.M (COMPOSITE mode), e.g. 0,1.1";
  std::vector<VisibleUnit> picked;
  for (absl::string_view e : absl::StrSplit(*v, ',')) {
    std::vector<absl::string_view> parts = absl::StrSplit(e, '.');
    int n = 0, m = -1;
    bool ok = (parts.size() == 1 || (parts.size() == 2 && !flat)) && ParseDecimal(parts[0], &n);
    if (ok && parts.size() == 2) ok = ParseDecimal(parts[1], &m);
    if (!ok) return BadMask("ZE_AFFINITY_MASK", *v, absl::StrCat("entry '", e, "' is malformed"), accepted);
    const std::vector<VisibleUnit>& pool = flat ? units : cards;
    if (n >= static_cast<int>(pool.size())) {
      return BadMask("ZE_AFFINITY_MASK", *v,
                     absl::StrCat("device ", n, " does not exist: ", pool.size(), " root device(s) visible"), accepted);
    }
    VisibleUnit u = pool[n];
    if (m >= 0) {
      if (m >= SubDevices(*u.device)) {
        return BadMask("ZE_AFFINITY_MASK", *v,
                       absl::StrCat("card ", n, " has ", SubDevices(*u.device), " tile(s), no tile ", m), accepted);
      }
      u.sub_device = m;
    }
    for (const VisibleUnit& p : picked) {
      if (p.device == u.device && p.sub_device == u.sub_device) {
        return BadMask("ZE_AFFINITY_MASK", *v, absl::StrCat("entry '", e, "' is listed twice"), accepted);
      }
    }
    picked.push_back(u);
  }
  units = std::move(picked);
  out.explanation.push_back(absl::StrCat("E-XPU ZE_AFFINITY_MASK=", *v, ": ", UnitList(units, "xpu")));
  return absl::OkStatus();
}

}  // namespace devplace::placement::visibility_internal
