// The transforms over Python callables and pytrees: grad, value_and_grad,
// vjp, scan and checkpoint, each calling the Python function once, when it
// traces; no_grad; sync and the metrics.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "strata/autograd/grad.h"
#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"
#include "strata/runtime/device.h"
#include "strata/transforms/cond.h"
#include "strata/transforms/scan.h"

namespace strata::python {

namespace {

// A strata.Tensor argument, or a TypeError naming the function and what came.
Tensor& TensorOnly(py::handle value, std::string_view op) {
  if (!py::isinstance<Tensor>(value)) {
    throw py::type_error(
        fmt::format("strata.{} takes strata.Tensors, got {}", op, std::string(py::repr(value))));
  }
  return value.cast<Tensor&>();
}

// set_config's values have the types strata.config() shows: a TypeError
// naming the setting otherwise (pybind11's cast says only "Unable to cast").
void CheckSettingType(const std::string& name, py::handle value) {
  const bool is_bool = py::isinstance<py::bool_>(value);
  const bool is_int = py::isinstance<py::int_>(value) && !is_bool;
  const bool is_str = py::isinstance<py::str>(value);
  const char* want = nullptr;
  if (name == "profile" || name == "fusion" || name == "index_checks" || name == "spmd_trace") {
    if (!is_bool) want = "a bool";
  } else if (name == "cpu_devices" || name == "collective_timeout_ms" || name == "device_threads") {
    if (!is_int) want = "an int";
  } else if ((name == "trace_path" || name == "isa" || name == "dump_dir" || name == "cache_dir") &&
             !is_str) {
    want = "a str (\"\" for none)";
  }
  if (want) {
    throw py::type_error(fmt::format("strata.set_config: {} must be {}, got {}", name, want,
                                     std::string(py::repr(value))));
  }
}

}  // namespace

namespace {

// Where a Python function was defined, for errors: "body (model.py:12)".
std::string Where(py::handle fn) {
  py::object code = py::getattr(fn, "__code__", py::none());
  std::string name =
      py::str(py::getattr(fn, "__qualname__", py::getattr(fn, "__name__", py::str("function"))));
  if (code.is_none()) return name;
  return fmt::format("{} ({}:{})", name, std::string(py::str(code.attr("co_filename"))),
                     code.attr("co_firstlineno").cast<int>());
}

// The Python structure of `value` with every tensor replaced by `...`: a
// template for FromTree that holds no tensor (a body's outputs must not
// outlive its trace: scan's leak check would see them).
py::object Skeleton(py::handle value) {
  if (py::isinstance<Tensor>(value)) return py::ellipsis();
  if (py::isinstance<py::dict>(value)) {
    py::dict out;
    for (auto [k, v] : value.cast<py::dict>()) out[k] = Skeleton(v);
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    py::list out;
    for (py::handle v : value) out.append(Skeleton(v));
    if (py::isinstance<py::tuple>(value)) return py::tuple(out);
    return out;
  }
  return py::reinterpret_borrow<py::object>(value);
}

// Runs `body`; a strata::Error from it gets `context` appended, so the
// message names the user's function as well as what was wrong.
template <typename F>
auto WithContext(const std::string& context, F&& body) {
  try {
    return body();
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    throw Error(fmt::format("{}\n  (in {})", e.what(), context));
  }
}

// The positions grad differentiates: argnums as an int or a tuple of ints.
std::vector<size_t> ArgNums(py::handle argnums, size_t count) {
  std::vector<size_t> out;
  for (int64_t i : DimsArg(argnums)) {
    if (i < 0) i += static_cast<int64_t>(count);
    if (i < 0 || i >= static_cast<int64_t>(count)) {
      throw py::value_error(
          fmt::format("argnums {} out of range for {} positional arguments", i, count));
    }
    out.push_back(static_cast<size_t>(i));
  }
  return out;
}

// A grad-like transform of fn: the differentiated arguments as one tree,
// and a C++ function of that tree calling fn with the others as given.
struct Differentiated {
  py::tuple args;
  py::kwargs kwargs;
  std::vector<size_t> positions;
  bool single;     // argnums was an int: the gradient is not wrapped in a tuple
  py::tuple like;  // the differentiated arguments

  Differentiated(py::tuple a, py::kwargs k, py::handle argnums)
      : args(std::move(a)),
        kwargs(std::move(k)),
        positions(ArgNums(argnums, args.size())),
        single(py::isinstance<py::int_>(argnums)),
        like(positions.size()) {
    for (size_t i = 0; i < positions.size(); ++i) like[i] = args[positions[i]];
  }
  Tree primals(const std::string& what) const {
    Tree::List items;
    for (size_t i = 0; i < positions.size(); ++i) {
      items.push_back(ToTree(like[i], fmt::format("{} (argument {})", what, positions[i])));
    }
    return Tree(std::move(items));
  }
  py::object Call(py::handle fn, const Tree& tree) const {
    py::object values = FromTree(tree, like);
    py::list call(args);
    for (size_t i = 0; i < positions.size(); ++i) call[positions[i]] = values[py::int_(i)];
    return fn(*py::tuple(call), **kwargs);
  }
  py::object Gradient(const Tree& tree) const {
    py::object g = FromTree(tree, like);
    return single ? py::object(g[py::int_(0)]) : g;
  }
};

Tensor ScalarOutput(py::handle out, const std::string& what) {
  if (!py::isinstance<Tensor>(out)) {
    throw py::type_error(
        fmt::format("{} needs the function to return a scalar strata.Tensor, got {}", what,
                    std::string(py::str(py::type::of(out).attr("__name__")))));
  }
  const Tensor& t = out.cast<const Tensor&>();
  if (t.rank() != 0) {
    Fail(
        "[{}] needs the function to return a scalar, got {}; reduce it (sum, mean) or use "
        "strata.vjp",
        what, t.shape().ToString());
  }
  return t;
}

py::object ValueAndGrad(py::function fn, py::object argnums, bool has_aux, bool with_value) {
  const std::string what = with_value ? "strata.value_and_grad" : "strata.grad";
  return py::cpp_function([fn, argnums, has_aux, with_value, what](py::args args,
                                                                   py::kwargs kwargs) {
    Differentiated d(args, kwargs, argnums);
    Tree primals = d.primals(what);
    return WithContext(Where(fn), [&]() -> py::object {
      if (!has_aux) {
        auto f = value_and_grad([&](const Tree& t) { return ScalarOutput(d.Call(fn, t), what); });
        auto [value, g] = f(primals);
        if (!with_value) return d.Gradient(g);
        return py::make_tuple(value, d.Gradient(g));
      }
      py::object aux_like;
      auto f = value_and_grad_with_aux([&](const Tree& t) {
        py::object out = d.Call(fn, t);
        if (!py::isinstance<py::tuple>(out) || py::len(out) != 2) {
          throw py::type_error(what +
                               "(has_aux=True) needs the function to return a pair "
                               "(scalar, aux)");
        }
        aux_like = Skeleton(out[py::int_(1)]);
        return std::pair{ScalarOutput(out[py::int_(0)], what),
                         ToTree(out[py::int_(1)], what + " aux")};
      });
      ValueAuxAndGrad r = f(primals);
      py::object aux = FromTree(r.aux, aux_like);
      if (!with_value) return py::make_tuple(d.Gradient(r.grad), aux);
      return py::make_tuple(py::make_tuple(r.value, aux), d.Gradient(r.grad));
    });
  });
}

// The leading slice of every leaf of xs, shaped as the body sees it (for
// the Python structure of x only; scan makes the real placeholders).
py::object Scan(py::function fn, py::object init, py::object xs, std::optional<int64_t> length,
                bool reverse, int64_t unroll, const std::string& remat) {
  ScanOptions options;
  options.reverse = reverse;
  options.length = length;
  options.unroll = unroll;
  options.remat = RematArg(remat);
  Tree init_tree = ToTree(init, "strata.scan init");
  Tree xs_tree = ToTree(xs, "strata.scan xs");
  py::object y_like = py::none();
  int64_t calls = 0;
  const std::string where = Where(fn);
  auto body = [&](const Tree& carry, const Tree& x) {
    ++calls;
    py::object out = fn(FromTree(carry, init), FromTree(x, xs));
    if (!py::isinstance<py::tuple>(out) || py::len(out) != 2) {
      throw py::type_error(
          fmt::format("strata.scan: the body {} must return a pair (carry, y), "
                      "got {}",
                      where, std::string(py::str(py::type::of(out).attr("__name__")))));
    }
    y_like = Skeleton(out[py::int_(1)]);
    return std::pair{ToTree(out[py::int_(0)], "strata.scan carry"),
                     ToTree(out[py::int_(1)], "strata.scan y")};
  };
  auto [carry, ys] = WithContext("the strata.scan body " + where,
                                 [&] { return strata::scan(body, init_tree, xs_tree, options); });
  return py::make_tuple(FromTree(carry, init), FromTree(ys, y_like));
}

// The branches as C++ functions of the operand tree, each calling its
// Python function with the operands spread (torch.cond's convention); the
// first branch's output structure is the result's.
std::vector<BranchFn> Branches(const std::vector<py::function>& fns, py::object operands,
                               py::object& out_like, const std::string& what) {
  std::vector<BranchFn> branches;
  for (size_t k = 0; k < fns.size(); ++k) {
    py::function fn = fns[k];
    branches.push_back([fn, operands, &out_like, what, k](const Tree& t) {
      py::object out = fn(*FromTree(t, operands));
      if (k == 0) out_like = Skeleton(out);
      return ToTree(out, what + " output");
    });
  }
  return branches;
}

py::tuple Operands(py::object operands, const char* what) {
  if (!py::isinstance<py::tuple>(operands) && !py::isinstance<py::list>(operands)) {
    throw py::type_error(
        fmt::format("{}: operands must be a tuple or a list, got {}", what,
                    std::string(py::str(py::type::of(operands).attr("__name__")))));
  }
  return py::tuple(operands);
}

py::object Cond(const Tensor& pred, py::function true_fn, py::function false_fn,
                py::object operands) {
  py::tuple args = Operands(operands, "strata.cond");
  py::object out_like = py::none();
  std::vector<BranchFn> fns = Branches({true_fn, false_fn}, args, out_like, "strata.cond");
  Tree out = WithContext(fmt::format("strata.cond({}, {})", Where(true_fn), Where(false_fn)), [&] {
    return cond(pred, fns[0], fns[1], ToTree(args, "strata.cond operands"));
  });
  return FromTree(out, out_like);
}

py::object SwitchCase(const Tensor& index, const std::vector<py::function>& branches,
                      py::object operands) {
  py::tuple args = Operands(operands, "strata.switch_case");
  py::object out_like = py::none();
  std::vector<BranchFn> fns = Branches(branches, args, out_like, "strata.switch_case");
  Tree out = WithContext("strata.switch_case", [&] {
    return switch_case(index, fns, ToTree(args, "strata.switch_case operands"));
  });
  return FromTree(out, out_like);
}

// As torch.func.vjp: a function with no floating output has nothing to
// differentiate (an integer output among floating ones gets no cotangent's
// effect, JAX's rule).
void CheckSomeOutputFloats(const Tree& out, const std::string& where) {
  const std::vector<Tensor>& leaves = out.leaves();
  if (!leaves.empty() && std::none_of(leaves.begin(), leaves.end(),
                                      [](const Tensor& t) { return IsFloating(t.dtype()); })) {
    Fail(
        "[vjp] every output of {} is an integer or bool tensor ({}); there is nothing to "
        "differentiate (torch.func.vjp refuses it too)",
        where, PythonDTypeName(leaves[0].dtype()));
  }
}

// `fn` as the Tree function vjp transforms; `out_like` gets its output's
// Python structure.
std::function<Tree(const Tree&)> TreeFunction(py::function fn, py::tuple like,
                                              py::object& out_like) {
  return [fn, like, &out_like](const Tree& t) {
    py::object out = fn(*FromTree(t, like));
    out_like = Skeleton(out);
    return ToTree(out, "strata.vjp output");
  };
}

Tree CotangentTree(py::object cotangent, const TreeSpec& out_spec) {
  Tree c = ToTree(cotangent, "strata.vjp cotangent");
  if (c.spec() != out_spec) {
    Fail("[vjp] the cotangent's structure {} differs from the output's {}", c.spec().ToString(),
         out_spec.ToString());
  }
  return c;
}

py::object Vjp(py::function fn, py::args primals) {
  py::object out_like = py::none();
  Tree primal_tree = ToTree(primals, "strata.vjp primals");
  const std::string where = Where(fn);
  auto [out, pullback] =
      WithContext(where, [&] { return vjp(TreeFunction(fn, primals, out_like), primal_tree); });
  CheckSomeOutputFloats(out, where);
  py::tuple like = primals;
  py::cpp_function back([pullback = pullback, like, out_spec = out.spec()](py::object cotangent) {
    return FromTree(pullback(CotangentTree(cotangent, out_spec)), like);
  });
  return py::make_tuple(FromTree(out, out_like), back);
}

py::object VjpWithResiduals(py::function fn, py::args primals) {
  py::object out_like = py::none();
  Tree primal_tree = ToTree(primals, "strata.vjp_with_residuals primals");
  const std::string where = Where(fn);
  StagedVjp staged = WithContext(
      where, [&] { return vjp_with_residuals(TreeFunction(fn, primals, out_like), primal_tree); });
  CheckSomeOutputFloats(staged.out, where);
  py::list residuals;
  for (const Tensor& r : staged.residuals) residuals.append(py::cast(r));
  py::tuple like = primals;
  // By default the pullback reads the residual objects it returned, which a
  // sync since has made data.
  py::cpp_function back(
      [pullback = staged.pullback, like, out_spec = staged.out.spec(), residuals](
          py::object cotangent, py::object given) {
        py::list from = given.is_none() ? residuals : py::list(given);
        std::vector<Tensor> values;
        for (py::handle r : from) values.push_back(ToTensor(r));
        return FromTree(pullback(CotangentTree(cotangent, out_spec), values), like);
      },
      py::arg("cotangent"), py::arg("residuals") = py::none());
  return py::make_tuple(FromTree(staged.out, out_like), residuals, back);
}

py::object Checkpoint(py::function fn, py::args args) {
  Tree tree = ToTree(args, "strata.checkpoint arguments");
  TreeSpec spec = tree.spec();
  py::object out_like;
  TreeSpec out_spec;
  std::vector<Tensor> outs = WithContext(Where(fn), [&] {
    return checkpoint(
        [&](const std::vector<Tensor>& inputs) {
          py::object result = fn(*FromTree(spec.Unflatten(inputs), args));
          out_like = Skeleton(result);
          Tree out = ToTree(result, "strata.checkpoint output");
          out_spec = out.spec();
          return out.leaves();
        },
        tree.leaves());
  });
  return FromTree(out_spec.Unflatten(outs), out_like);
}

struct NoGradScope {
  std::unique_ptr<NoGrad> scope;
};

}  // namespace

void BindTransforms(py::module_& m) {
  m.def(
      "grad",
      [](py::function fn, py::object argnums, bool has_aux) {
        return ValueAndGrad(fn, argnums, has_aux, false);
      },
      py::arg("fn"), py::arg("argnums") = 0, py::arg("has_aux") = false,
      "jax.grad: a function returning d fn / d args[argnums], shaped like them.");
  m.def(
      "value_and_grad",
      [](py::function fn, py::object argnums, bool has_aux) {
        return ValueAndGrad(fn, argnums, has_aux, true);
      },
      py::arg("fn"), py::arg("argnums") = 0, py::arg("has_aux") = false);
  m.def("vjp", &Vjp, py::arg("fn"), "jax.vjp: (fn(*primals), pullback).");
  m.def("vjp_with_residuals", &VjpWithResiduals, py::arg("fn"),
        "vjp split as AOTAutograd splits a joint graph: (fn(*primals), residuals, pullback). "
        "Sync the residuals (the forward values the pullback reads) with the outputs, and "
        "pullback(cotangent) reads their data instead of running the forward again.");
  m.def("scan", &Scan, py::arg("fn"), py::arg("init"), py::arg("xs") = py::none(),
        py::arg("length") = py::none(), py::arg("reverse") = false, py::arg("unroll") = 1,
        py::arg("remat") = "carries",
        "jax.lax.scan as one compiled While loop; fn(carry, x) -> (carry, y) is called once, "
        "when it traces.");
  m.def("cond", &Cond, py::arg("pred"), py::arg("true_fn"), py::arg("false_fn"),
        py::arg("operands") = py::tuple(),
        "true_fn(*operands) if pred else false_fn(*operands), as one compiled conditional "
        "(torch.cond, jax.lax.cond): both traced once, only the chosen one runs.");
  m.def("switch_case", &SwitchCase, py::arg("index"), py::arg("branches"),
        py::arg("operands") = py::tuple(),
        "branches[index](*operands) with index clamped to the branches (jax.lax.switch), as one "
        "compiled conditional.");
  m.def("checkpoint", &Checkpoint, py::arg("fn"),
        "fn(*args), with fn's intermediates recomputed in backward instead of kept.");

  py::class_<NoGradScope>(m, "no_grad",
                          "Ops built inside `with strata.no_grad():` carry no gradient.")
      .def(py::init<>())
      .def("__enter__",
           [](NoGradScope& s) {
             if (s.scope) Fail("[no_grad] this no_grad is already entered");
             s.scope = std::make_unique<NoGrad>();
           })
      .def("__exit__", [](NoGradScope& s, py::args) { s.scope.reset(); });

  m.def(
      "sync",
      [](py::args tensors) {
        if (tensors.size() == 0) {
          py::gil_scoped_release release;
          sync();
          return;
        }
        std::vector<Tensor*> targets;
        for (py::handle t : tensors) targets.push_back(&TensorOnly(t, "sync"));
        py::gil_scoped_release release;
        sync(targets);
      },
      "Runs the pending IR of the given tensors, or of every live tensor (mark_step).");
  m.def("gradients", &gradients, py::arg("output"), py::arg("inputs"),
        "d output / d inputs for a scalar output, one tensor per input (lazy).");
  m.def(
      "set_buffer_donation", [](bool on) { lazy::Context::Get().set_buffer_donation(on); },
      py::arg("on"),
      "Lets a sync write its results into the buffers of inputs nothing else can read "
      "(an optimizer step's old weights), as strata train does.");
  m.def("metrics_report", [] { return lazy::Context::Get().MetricsReport(); });
  m.def("metrics", [] {
    lazy::Metrics& mt = lazy::Context::Get().metrics();
    py::dict d;
    d["graphs_traced"] = mt.graphs_traced.load();
    d["compiles"] = mt.compiles.load();
    d["cache_hits"] = mt.cache_hits.load();
    d["cache_misses"] = mt.cache_misses.load();
    d["executions"] = mt.executions.load();
    d["bytes_to_device"] = mt.bytes_to_device.load();
    d["bytes_from_device"] = mt.bytes_from_device.load();
    d["bytes_donated"] = mt.bytes_donated.load();
    d["disk_cache_hits"] = mt.disk_cache_hits.load();
    // Seconds spent lowering graphs to HLO and compiling them (or reading
    // them from the persistent cache), and running programs.
    d["lower_s"] = static_cast<double>(mt.lower_ns.load()) * 1e-9;
    d["compile_s"] = static_cast<double>(mt.compile_ns.load()) * 1e-9;
    d["execute_s"] = static_cast<double>(mt.execute_ns.load()) * 1e-9;
    return d;
  });
  m.def("reset_metrics", [] { lazy::Context::Get().ResetMetrics(); });
  m.def(
      "memory_stats",
      [] {
        const runtime::Client& client = runtime::Client::Default();
        py::dict d;
        int64_t cached = 0;
        for (int i = 0; i < client.device_count(); ++i) cached += client.device(i)->cached_bytes();
        d["block_cache_bytes"] = cached;
        d["idle_arena_bytes"] = client.idle_arena_bytes();
        d["arenas_allocated"] = client.arenas_allocated();
        return d;
      },
      "What strata's memory pools hold while no program runs: freed result blocks kept "
      "for reuse (block_cache_bytes) and idle program arenas (idle_arena_bytes).");
  m.def(
      "set_dump_dir", [](std::string dir) { lazy::Context::Get().set_dump_dir(std::move(dir)); },
      py::arg("directory"), "Writes each compiled graph's IR, dot and HLO text there ('' = off).");
  m.def(
      "config",
      [] {
        const Config c = lazy::Context::Get().config();
        py::dict d;
        d["cpu_devices"] = c.cpu_devices;
        d["profile"] = c.profile;
        d["fusion"] = c.fusion;
        d["trace_path"] = c.trace_path;
        d["isa"] = c.isa;
        d["collective_timeout_ms"] = c.collective_timeout.count();
        d["dump_dir"] = c.dump_dir;
        d["cache_dir"] = c.cache_dir;
        d["index_checks"] = c.index_checks;
        d["device_threads"] = c.device_threads;
        d["spmd_trace"] = c.spmd_trace;
        return d;
      },
      "The settings this process runs with (docs/configuration.md), from the environment "
      "unless set_config changed them.");
  m.def(
      "set_config",
      [](py::kwargs changes) {
        Config c = lazy::Context::Get().config();
        for (auto [key, value] : changes) {
          const std::string name = key.cast<std::string>();
          CheckSettingType(name, value);
          if (name == "cpu_devices")
            c.cpu_devices = value.cast<int>();
          else if (name == "profile")
            c.profile = value.cast<bool>();
          else if (name == "fusion")
            c.fusion = value.cast<bool>();
          else if (name == "trace_path")
            c.trace_path = value.cast<std::string>();
          else if (name == "isa")
            c.isa = value.cast<std::string>();
          else if (name == "collective_timeout_ms")
            c.collective_timeout = std::chrono::milliseconds(value.cast<int64_t>());
          else if (name == "dump_dir")
            c.dump_dir = value.cast<std::string>();
          else if (name == "cache_dir")
            c.cache_dir = value.cast<std::string>();
          else if (name == "index_checks")
            c.index_checks = value.cast<bool>();
          else if (name == "device_threads")
            c.device_threads = value.cast<int>();
          else if (name == "spmd_trace")
            c.spmd_trace = value.cast<bool>();
          else
            throw py::type_error("strata.set_config: no setting named '" + name + "'");
        }
        lazy::Context::Get().set_config(c);
      },
      "Changes settings by name (the keys of strata.config()); per-process ones (cpu_devices, "
      "profile, isa, trace_path) only before the first kernel or client is made.");
  m.def(
      "hlo_text",
      [](py::args tensors) {
        std::vector<Tensor> roots;
        for (py::handle t : tensors) roots.push_back(TensorOnly(t, "hlo_text"));
        return lazy::LoweringContext(roots).hlo_text();
      },
      "The HLO program that syncing the tensors would compile.");
  m.def("last_miss_explanation", [] { return lazy::Context::Get().last_miss_explanation(); });
}

}  // namespace strata::python
