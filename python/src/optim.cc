// strata.optim: the C++ optimizers (nn/optim.h) over Python-held parameters.
// A step rebinds each parameter tensor to its updated (lazy) value, so
// forward, backward and the update trace into one graph that sync() runs.
#include <pybind11/stl.h>

#include "bindings.h"
#include "strata/autograd/grad.h"
#include "strata/nn/optim.h"

namespace strata::python {

namespace {

// The parameters as the optimizer sees them; the list keeps the Python
// tensors (and so the C++ handles they hold) alive.
struct Params {
  py::list objects;
  std::vector<Tensor*> tensors;
  explicit Params(py::iterable params) {
    for (py::handle p : params) {
      if (!py::isinstance<Tensor>(p)) {
        throw py::type_error("optimizer parameters must be strata.Tensors, got " +
                             std::string(py::str(py::type::of(p).attr("__name__"))));
      }
      objects.append(p);
      tensors.push_back(&p.cast<Tensor&>());
    }
  }
  // The gradients given, or each parameter's .grad (backward's).
  std::vector<Tensor> Grads(py::object grads) const {
    std::vector<Tensor> out;
    if (!grads.is_none()) {
      for (py::handle g : grads) out.push_back(ToTensor(g));
      if (out.size() != tensors.size())
        Fail("[optimizer] {} gradients for {} parameters", out.size(), tensors.size());
      return out;
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      Tensor g = grad(*tensors[i]);
      if (!g.defined()) {
        Fail(
            "[optimizer] parameter {} ({}) has no .grad: call loss.backward() first, or pass "
            "the gradients to step()",
            i, tensors[i]->shape().ToString());
      }
      out.push_back(g);
    }
    return out;
  }
  void ZeroGrad() const {
    for (Tensor* t : tensors) zero_grad(*t);
  }
};

template <typename Optimizer, typename Options>
struct Bound {
  Params params;
  Optimizer optimizer;
  Bound(py::iterable p, Options options) : params(p), optimizer(params.tensors, options) {}
};

using BoundSgd = Bound<nn::SGD, nn::SgdOptions>;
using BoundAdamW = Bound<nn::AdamW, nn::AdamWOptions>;

// What every optimizer has: step(grads=None), zero_grad(), lr.
template <typename B>
py::class_<B>& WithCommonMethods(py::class_<B>& c) {
  c.def(
       "step", [](B& o, py::object grads) { o.optimizer.step(o.params.Grads(grads)); },
       py::arg("grads") = py::none(),
       "One update from the gradients given, or from each parameter's .grad.")
      .def("zero_grad", [](B& o) { o.params.ZeroGrad(); })
      .def_property(
          "lr", [](B& o) { return o.optimizer.lr(); },
          [](B& o, double lr) { o.optimizer.set_lr(lr); });
  return c;
}

}  // namespace

void BindOptim(py::module_& parent) {
  py::module_ m =
      parent.def_submodule("optim", "torch.optim's SGD and AdamW, clipping, the schedule");
  py::class_<BoundSgd> sgd(m, "SGD");
  sgd.def(py::init([](py::iterable params, double lr, double momentum, double dampening,
                      double weight_decay, bool nesterov) {
            return new BoundSgd(params,
                                nn::SgdOptions{lr, momentum, dampening, weight_decay, nesterov});
          }),
          py::arg("params"), py::arg("lr") = 1e-2, py::arg("momentum") = 0.0,
          py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false);
  WithCommonMethods(sgd);
  py::class_<BoundAdamW> adamw(m, "AdamW");
  adamw
      .def(py::init([](py::iterable params, double lr, std::pair<double, double> betas, double eps,
                       double weight_decay) {
             return new BoundAdamW(
                 params, nn::AdamWOptions{lr, betas.first, betas.second, eps, weight_decay});
           }),
           py::arg("params"), py::arg("lr") = 1e-3, py::arg("betas") = std::pair{0.9, 0.999},
           py::arg("eps") = 1e-8, py::arg("weight_decay") = 1e-2)
      .def_property_readonly("steps", [](BoundAdamW& o) { return o.optimizer.steps(); });
  WithCommonMethods(adamw);
  m.def(
      "clip_grad_norm_",
      [](py::list grads, double max_norm) {
        std::vector<Tensor> g;
        for (py::handle t : grads) g.push_back(ToTensor(t));
        Tensor norm = nn::clip_grad_norm(g, max_norm);
        for (size_t i = 0; i < g.size(); ++i) grads[i] = py::cast(g[i]);
        return norm;
      },
      py::arg("grads"), py::arg("max_norm"),
      "Scales the gradients in the list in place by min(1, max_norm / (norm + 1e-6)); "
      "returns the norm before clipping.");
  m.def("warmup_cosine_lr", &nn::warmup_cosine_lr, py::arg("step"), py::arg("warmup"),
        py::arg("total"), py::arg("peak"), py::arg("min_lr") = 0.0);
}

}  // namespace strata::python
