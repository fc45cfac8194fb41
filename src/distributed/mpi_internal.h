// What the MPI communicator shares with process startup.
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

namespace strata::distributed {

// strata's own duplicate of MPI_COMM_WORLD (made once, when MPI starts), so
// its messages never meet a user's. MPI_COMM_NULL outside an MPI job.
MPI_Comm StrataComm();

// The host each process of the job runs on (MPI_Get_processor_name), by
// rank; {"this host"} outside an MPI job.
const std::vector<std::string>& Hosts();

// The job's liveness watch (liveness.cc): started once MPI is up, over a
// communicator of its own; a peer not heard from for `timeout` is lost.
// StopLiveness tells the peers this process leaves (before MPI_Finalize).
// LostPeer is "" while every peer is heard from, else the Error's text
// naming the lost process and its host.
void StartLiveness(MPI_Comm comm, int me, const std::vector<std::string>& hosts,
                   std::chrono::milliseconds timeout);
void StopLiveness();
std::string LostPeer();

}  // namespace strata::distributed
