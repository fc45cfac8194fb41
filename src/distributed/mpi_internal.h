// What the MPI communicator shares with process startup.
#pragma once

#include <mpi.h>

namespace strata::distributed {

// strata's own duplicate of MPI_COMM_WORLD (made once, when MPI starts), so
// its messages never meet a user's. MPI_COMM_NULL outside an MPI job.
MPI_Comm StrataComm();

}  // namespace strata::distributed
