"""Seeing where data lives: ``visualize_sharding`` draws which device holds
which block of a tensor, as ``jax.debug.visualize_array_sharding`` does."""
import math

from . import _strata


def _blocks(shape, mesh, spec):
    """{tile coordinates: [device ids]}: the block of each device (a block held
    by several devices is replicated over the mesh axes its dims do not use)."""
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    blocks = {}
    for position, device in enumerate(mesh.device_ids):
        coords, rest = {}, position  # row-major over the mesh's axes
        for name, size in reversed(list(zip(mesh.axis_names, mesh.shape))):
            coords[name], rest = rest % size, rest // size
        tile = []
        for axes in spec:  # several axes on one dim: the first is the major one
            index = 0
            for a in axes:
                index = index * sizes[a] + coords[a]
            tile.append(index)
        blocks.setdefault(tuple(tile), []).append(device)
    return blocks


def _ranges(size, tiles):
    step = math.ceil(size / tiles) if tiles else size
    return [f"{min(i * step, size)}:{min((i + 1) * step, size)}" for i in range(tiles)]


def visualize_sharding(x):
    """Prints (and returns) a table of x's blocks and the devices holding each:
    rows and columns of a 2-D tensor, the blocks of a 1-D one."""
    shape = tuple(x.shape)
    parts = _strata._sharding_parts(x)
    head = f"{x.dtype.name}{list(shape)}"
    if parts is None:
        text = f"{head}: not sharded (one device holds it whole)"
        print(text)
        return text
    mesh, spec = parts
    if len(shape) > 2:
        raise _strata.Error(f"[visualize_sharding] draws 1-D and 2-D tensors, got {head}")
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    tiles = [math.prod(sizes[a] for a in axes) for axes in spec]
    blocks = _blocks(shape, mesh, spec)
    grid = (tiles + [1, 1])[:2]
    rows = _ranges(shape[0], grid[0]) if len(shape) >= 1 else [""]
    cols = _ranges(shape[1], grid[1]) if len(shape) == 2 else [""]
    cell = {}
    for tile, devices in blocks.items():
        r, c = (tuple(tile) + (0, 0))[:2]
        cell[(r, c)] = "device " + ",".join(str(d) for d in devices) if len(devices) == 1 \
            else "devices " + ",".join(str(d) for d in devices)
    lines = [f"{head} {_strata.sharding_of(x)}"]
    header = [""] + [f"cols {c}" if c else "" for c in cols]
    table = [header] + [[f"rows {r}" if r else ""] + [cell[(i, j)] for j in range(len(cols))]
                        for i, r in enumerate(rows)]
    widths = [max(len(row[k]) for row in table) for k in range(len(header))]
    for row in table if len(shape) == 2 else table[1:]:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())
    text = "\n".join(lines)
    print(text)
    return text
