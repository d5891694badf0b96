"""Index geometry without MPI: where a distributed matrix's elements and a stencil's tiles lie."""
