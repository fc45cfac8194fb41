// A compiled program-IR module (compiler::Compile makes one), and running
// it. It is immutable: Run may be called from several threads at once.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "strata/hlo/module.h"
#include "strata/runtime/device.h"

namespace strata::runtime {

struct PlanStats {
  int64_t temp_bytes = 0;          // the arena: temporaries, loop state, scratch
  int64_t output_bytes = 0;        // result buffers handed to the caller
  int64_t planned_peak_bytes = 0;  // temp + output
  int64_t in_place_updates = 0;    // values written over a dead operand's storage
  int64_t placed_updates = 0;      // dynamic-update-slices whose update was computed in place
  int64_t kernels = 0;             // kernel steps of the entry computation (no loop bodies)
};

class Program;
class Communicator;
struct RunContext;

class Executable {
 public:
  // `module` after the passes, and the program compiler::Compile planned
  // for its entry computation.
  Executable(std::unique_ptr<hlo::Module> module, std::unique_ptr<Program> program,
             const Client* client);
  ~Executable();

  // Arguments are the entry parameters' array leaves, in parameter order.
  // Returns the root's array leaves (one buffer for an array root).
  //
  // `donated[i]` gives argument i's bytes to the run (buffer donation, as
  // XLA's): a result may be written straight into them instead of a new
  // buffer (it then shares the argument's storage), when the program reads
  // that argument for the last time before it first writes that result.
  // The caller must not read a donated argument afterwards.
  std::vector<Buffer> Run(const std::vector<Buffer>& arguments, const Device* device = nullptr,
                          const std::vector<bool>& donated = {}) const;
  // Donation with each result's place named: result k goes into argument
  // homes[k]'s bytes (homes[k] >= 0, its size) when the program reads that
  // argument for the last time before it first writes the result, else
  // into a new buffer. An in-place update (an optimizer's) that must land
  // in the caller's own storage. The caller must not read an argument named
  // there afterwards unless no result took it.
  std::vector<Buffer> RunInto(const std::vector<Buffer>& arguments,
                              const std::vector<int64_t>& homes,
                              const Device* device = nullptr) const;

  // An SPMD program (module().num_partitions() copies, each reading its own
  // partition-id): runs every partition on its own thread and device,
  // exchanging data through `communicator`; arguments[p] and devices[p] are
  // partition p's. When one partition fails the communicator is aborted, so
  // the others stop instead of waiting, and the first error is rethrown.
  std::vector<std::vector<Buffer>> RunPartitioned(const std::vector<std::vector<Buffer>>& arguments,
                                                  const std::vector<const Device*>& devices,
                                                  Communicator& communicator,
                                                  const std::vector<bool>& donated = {}) const;
  // Partitions first .. first + arguments.size() - 1 alone, the same way:
  // this process's share when the others run in other processes (MPI).
  std::vector<std::vector<Buffer>> RunPartitions(int64_t first,
                                                 const std::vector<std::vector<Buffer>>& arguments,
                                                 const std::vector<const Device*>& devices,
                                                 Communicator& communicator,
                                                 const std::vector<bool>& donated = {}) const;
  // One partition's run from a thread (or process) the caller owns.
  std::vector<Buffer> RunPartition(int64_t partition, const std::vector<Buffer>& arguments,
                                   const Device* device, Communicator& communicator,
                                   const std::vector<bool>& donated = {}) const;

  // The module after passes, as it is executed.
  const hlo::Module& module() const { return *module_; }
  const PlanStats& stats() const { return stats_; }
  const std::vector<Shape>& parameter_shapes() const { return parameter_shapes_; }
  const std::vector<Shape>& result_shapes() const { return result_shapes_; }

 private:
  void CheckSinglePartition() const;  // Run and RunInto: an SPMD program is an Error
  std::vector<Buffer> RunWith(const std::vector<Buffer>& arguments, const Device* device,
                              const std::vector<bool>& donated, const RunContext& context,
                              const std::vector<int64_t>& homes = {}) const;
  std::unique_ptr<hlo::Module> module_;
  std::unique_ptr<Program> program_;
  const Client* client_ = nullptr;
  PlanStats stats_;
  std::vector<Shape> parameter_shapes_;
  std::vector<Shape> result_shapes_;
  // A program of one partition whose collectives (XLA's modules have them
  // over a group of one) run with a communicator of one member.
  bool has_collectives_ = false;
};

}  // namespace strata::runtime
