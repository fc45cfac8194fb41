"""Where a traced graph becomes a strata.CompiledGraph."""
import strata


def compiled_graph(inputs, outputs):
    """(the compiled graph, whether its program came from a cache strata
    already held rather than a compile)."""
    graph = strata.CompiledGraph(inputs, outputs)
    return graph, not graph.compiled
