// PyTorch binding of the s4d deformable aggregation op library. The kernels
// themselves are the C/CUDA sources of kernels/deformable_aggregation; this
// file only maps tensors to the C API (pointers, sizes, dtypes, the current
// CUDA stream) and turns statuses into Python exceptions.
//
// Two entry points share that mapping: the operator s4d::deformable_aggregation
// (and its backward), registered with the dispatcher here - CPU, CUDA, Meta
// and Autograd kernels - so that a call from Python crosses into C++ once;
// and the raw functions of the Python module s4d._C (int32 index tables
// only, no autograd), kept for benchmarks and examples.
//
// The Python layer (s4d/ops/_deformable_aggregation.py) validates arguments
// with messages naming the argument; the checks here repeat the ones whose
// failure would read out of bounds, for callers that reach the operator or
// the binding directly.
#include <torch/extension.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>

#include <string>
#include <tuple>
#include <vector>

#ifdef S4D_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "s4d/deformable_aggregation.h"

namespace {

s4d_dtype to_s4d_dtype(const at::Tensor &t, const char *name)
{
    switch (t.scalar_type()) {
    case at::kFloat: return S4D_DTYPE_FLOAT32;
    case at::kHalf: return S4D_DTYPE_FLOAT16;
    default: break;
    }
    TORCH_CHECK_TYPE(false, "s4d deformable_aggregation: ", name,
                     " must be float32 or float16, got ", t.scalar_type());
    return S4D_DTYPE_UNDEFINED;
}

void check_tensor(const at::Tensor &t, const char *name, int64_t dim, const at::Device &device)
{
    TORCH_CHECK_VALUE(t.defined(), "s4d deformable_aggregation: ", name, " is undefined");
    TORCH_CHECK_VALUE(t.dim() == dim, "s4d deformable_aggregation: ", name, " must have ", dim,
                      " dimensions, got shape ", t.sizes());
    TORCH_CHECK_VALUE(t.device() == device, "s4d deformable_aggregation: ", name, " is on ",
                      t.device(), " but features is on ", device);
    TORCH_CHECK_VALUE(t.is_contiguous(), "s4d deformable_aggregation: ", name,
                      " must be contiguous");
}

void check_index(const at::Tensor &t, const char *name, int64_t dim, const at::Device &device)
{
    check_tensor(t, name, dim, device);
    TORCH_CHECK_TYPE(t.scalar_type() == at::kInt, "s4d deformable_aggregation: ", name,
                     " must be int32 at the binding, got ", t.scalar_type());
}

void check_status(s4d_status st, const s4d_errbuf &err, const char *what)
{
    if (st == S4D_OK)
        return;
    const std::string msg = std::string("s4d deformable_aggregation ") + what + ": " +
                            s4d_status_string(st) + ": " + err.msg;
    switch (st) {
    case S4D_ERR_INVALID_ARG:
    case S4D_ERR_SHAPE: TORCH_CHECK_VALUE(false, msg); break;
    case S4D_ERR_DTYPE: TORCH_CHECK_TYPE(false, msg); break;
    case S4D_ERR_UNSUPPORTED: TORCH_CHECK_NOT_IMPLEMENTED(false, msg); break;
    case S4D_OK:
    case S4D_ERR_NO_MEMORY:
    case S4D_ERR_CUDA:
    case S4D_ERR_IO:
    case S4D_ERR_PARSE:
    case S4D_ERR_NOT_FOUND:
    case S4D_ERR_VERSION:
    case S4D_ERR_CHECKSUM:
    case S4D_ERR_PLUGIN:
    case S4D_ERR_NO_DEVICE:
    case S4D_ERR_INTERNAL: break;
    }
    TORCH_CHECK(false, msg);
}

// Checks every tensor's rank, device and layout and derives the sizes.
s4d_da_sizes make_sizes(const at::Tensor &features, const at::Tensor &spatial_shape,
                        const at::Tensor &scale_start_index, const at::Tensor &sampling_location,
                        const at::Tensor &weights)
{
    const at::Device dev = features.device();
    check_tensor(features, "features", 3, dev);
    check_index(spatial_shape, "spatial_shape", 3, dev);
    check_index(scale_start_index, "scale_start_index", 2, dev);
    check_tensor(sampling_location, "sampling_location", 5, dev);
    check_tensor(weights, "weights", 6, dev);
    TORCH_CHECK_TYPE(sampling_location.scalar_type() == at::kFloat,
                     "s4d deformable_aggregation: sampling_location must be float32, got ",
                     sampling_location.scalar_type());

    s4d_da_sizes s{};
    s.struct_size = sizeof(s);
    s.batch = features.size(0);
    s.num_rows = features.size(1);
    s.channels = features.size(2);
    s.num_cams = spatial_shape.size(0);
    s.num_levels = spatial_shape.size(1);
    s.num_groups = weights.size(5);
    s.num_anchors = sampling_location.size(1);
    s.num_points = sampling_location.size(2);

    const std::vector<int64_t> want_ss{s.num_cams, s.num_levels, 2};
    const std::vector<int64_t> want_si{s.num_cams, s.num_levels};
    const std::vector<int64_t> want_loc{s.batch, s.num_anchors, s.num_points, s.num_cams, 2};
    const std::vector<int64_t> want_w{s.batch, s.num_anchors, s.num_points, s.num_cams,
                                      s.num_levels, s.num_groups};
    TORCH_CHECK_VALUE(spatial_shape.sizes() == at::IntArrayRef(want_ss),
                      "s4d deformable_aggregation: spatial_shape must be [N, L, 2], got ",
                      spatial_shape.sizes());
    TORCH_CHECK_VALUE(scale_start_index.sizes() == at::IntArrayRef(want_si),
                      "s4d deformable_aggregation: scale_start_index must be ", want_si, ", got ",
                      scale_start_index.sizes());
    TORCH_CHECK_VALUE(sampling_location.sizes() == at::IntArrayRef(want_loc),
                      "s4d deformable_aggregation: sampling_location must be ", want_loc,
                      ", got ", sampling_location.sizes());
    TORCH_CHECK_VALUE(weights.sizes() == at::IntArrayRef(want_w),
                      "s4d deformable_aggregation: weights must be ", want_w, ", got ",
                      weights.sizes());
    return s;
}

// A tensor the kernels overwrite completely. at::empty fills new CUDA memory with NaN
// when torch.use_deterministic_algorithms(True) is on (fill_uninitialized_memory), one
// extra kernel per output: 92 MB for grad_features of the Sparse4Dv3 workload. The
// lower-level allocator skips that fill; the CPU path keeps at::empty.
at::Tensor empty_overwritten(at::IntArrayRef sizes, const at::TensorOptions &options)
{
#ifdef S4D_WITH_CUDA
    if (options.device().is_cuda())
        return at::Tensor(at::detail::empty_cuda(sizes, options));
#endif
    return at::empty(sizes, options);
}

#ifdef S4D_WITH_CUDA
void *current_stream(const at::Tensor &t)
{
    return static_cast<void *>(at::cuda::getCurrentCUDAStream(t.device().index()).stream());
}
#endif

at::Tensor da_forward(const at::Tensor &features, const at::Tensor &spatial_shape,
                      const at::Tensor &scale_start_index, const at::Tensor &sampling_location,
                      const at::Tensor &weights, bool deterministic)
{
    s4d_da_forward_args a{};
    a.struct_size = sizeof(a);
    a.sizes = make_sizes(features, spatial_shape, scale_start_index, sampling_location, weights);
    a.features_dtype = to_s4d_dtype(features, "features");
    a.weights_dtype = to_s4d_dtype(weights, "weights");
    a.output_dtype = a.features_dtype;
    at::Tensor out = empty_overwritten({a.sizes.batch, a.sizes.num_anchors, a.sizes.channels},
                                       features.options());
    if (out.numel() == 0)
        return out;
    a.features = features.data_ptr();
    a.spatial_shape = spatial_shape.data_ptr<int32_t>();
    a.scale_start_index = scale_start_index.data_ptr<int32_t>();
    a.sampling_location = sampling_location.data_ptr<float>();
    a.weights = weights.data_ptr();
    a.output = out.data_ptr();

    s4d_errbuf err{};
    s4d_status st;
    if (features.is_cuda()) {
#ifdef S4D_WITH_CUDA
        const c10::cuda::CUDAGuard guard(features.device());
        const s4d_da_algo algo = deterministic ? S4D_DA_ALGO_DETERMINISTIC : S4D_DA_ALGO_FAST;
        const size_t ws_bytes = s4d_da_forward_workspace_size(&a.sizes, algo);
        // The caching allocator keeps this capture-safe under CUDA graphs; no allocation
        // at all when the kernel needs none.
        at::Tensor ws;
        if (ws_bytes)
            ws = empty_overwritten({static_cast<int64_t>(ws_bytes)},
                                   features.options().dtype(at::kByte));
        st = s4d_da_forward_cuda(&a, algo, ws_bytes ? ws.data_ptr() : nullptr,
                                 current_stream(features), &err);
#else
        TORCH_CHECK_NOT_IMPLEMENTED(false, "s4d deformable_aggregation: this build of the "
                                    "extension has no CUDA kernels (rebuild with a CUDA torch)");
#endif
    } else {
        TORCH_CHECK_VALUE(features.is_cpu(), "s4d deformable_aggregation: features must be on "
                          "CPU or CUDA, got ", features.device());
        st = s4d_da_forward_cpu(&a, at::get_num_threads(), &err);
    }
    check_status(st, err, "forward");
    return out;
}

std::vector<at::Tensor> da_backward(const at::Tensor &features, const at::Tensor &spatial_shape,
                                    const at::Tensor &scale_start_index,
                                    const at::Tensor &sampling_location, const at::Tensor &weights,
                                    const at::Tensor &grad_output, bool need_features,
                                    bool need_location, bool need_weights, bool deterministic)
{
    s4d_da_backward_args a{};
    a.struct_size = sizeof(a);
    a.sizes = make_sizes(features, spatial_shape, scale_start_index, sampling_location, weights);
    a.features_dtype = to_s4d_dtype(features, "features");
    a.weights_dtype = to_s4d_dtype(weights, "weights");
    check_tensor(grad_output, "grad_output", 3, features.device());
    a.grad_output_dtype = to_s4d_dtype(grad_output, "grad_output");
    const std::vector<int64_t> want_go{a.sizes.batch, a.sizes.num_anchors, a.sizes.channels};
    TORCH_CHECK_VALUE(grad_output.sizes() == at::IntArrayRef(want_go),
                      "s4d deformable_aggregation: grad_output must be ", want_go, ", got ",
                      grad_output.sizes());

    // Undefined tensors come back to Python as None.
    at::Tensor g_feat, g_loc, g_w;
    if (need_features)
        g_feat = empty_overwritten(features.sizes(), features.options());
    if (need_location)
        g_loc = empty_overwritten(sampling_location.sizes(), sampling_location.options());
    if (need_weights)
        g_w = empty_overwritten(weights.sizes(), weights.options());
    if (grad_output.numel() == 0 || features.numel() == 0 || sampling_location.numel() == 0) {
        for (at::Tensor *g : {&g_feat, &g_loc, &g_w})
            if (g->defined())
                g->zero_();
        return {g_feat, g_loc, g_w};
    }
    if (!need_features && !need_location && !need_weights)
        return {g_feat, g_loc, g_w};
    a.features = features.data_ptr();
    a.spatial_shape = spatial_shape.data_ptr<int32_t>();
    a.scale_start_index = scale_start_index.data_ptr<int32_t>();
    a.sampling_location = sampling_location.data_ptr<float>();
    a.weights = weights.data_ptr();
    a.grad_output = grad_output.data_ptr();
    a.grad_features = need_features ? g_feat.data_ptr() : nullptr;
    a.grad_sampling_location = need_location ? g_loc.data_ptr<float>() : nullptr;
    a.grad_weights = need_weights ? g_w.data_ptr() : nullptr;

    s4d_errbuf err{};
    s4d_status st;
    if (features.is_cuda()) {
#ifdef S4D_WITH_CUDA
        const c10::cuda::CUDAGuard guard(features.device());
        const s4d_da_algo algo = deterministic ? S4D_DA_ALGO_DETERMINISTIC : S4D_DA_ALGO_FAST;
        const size_t ws_bytes = s4d_da_backward_workspace_size_algo(&a.sizes, algo);
        at::Tensor ws;
        if (ws_bytes)
            ws = empty_overwritten({static_cast<int64_t>(ws_bytes)},
                                   features.options().dtype(at::kByte));
        st = s4d_da_backward_cuda_algo(&a, algo, ws_bytes ? ws.data_ptr() : nullptr,
                                       current_stream(features), &err);
#else
        TORCH_CHECK_NOT_IMPLEMENTED(false, "s4d deformable_aggregation: this build of the "
                                    "extension has no CUDA kernels (rebuild with a CUDA torch)");
#endif
    } else {
        TORCH_CHECK_VALUE(features.is_cpu(), "s4d deformable_aggregation: features must be on "
                          "CPU or CUDA, got ", features.device());
        st = s4d_da_backward_cpu(&a, at::get_num_threads(), &err);
    }
    check_status(st, err, "backward");
    return {g_feat, g_loc, g_w};
}

// Host-side validation of the map layout against F rows (the CPU functions
// run it themselves; the CUDA path calls it on host copies).
void da_check_indices(const at::Tensor &spatial_shape, const at::Tensor &scale_start_index,
                      int64_t num_rows)
{
    const at::Device cpu(at::kCPU);
    check_index(spatial_shape, "spatial_shape", 3, cpu);
    check_index(scale_start_index, "scale_start_index", 2, cpu);
    TORCH_CHECK_VALUE(spatial_shape.size(2) == 2 &&
                          scale_start_index.sizes() == spatial_shape.sizes().slice(0, 2),
                      "s4d deformable_aggregation: spatial_shape ", spatial_shape.sizes(),
                      " and scale_start_index ", scale_start_index.sizes(),
                      " must be [N, L, 2] and [N, L]");
    s4d_da_sizes s{};
    s.struct_size = sizeof(s);
    s.batch = 1;
    s.num_rows = num_rows;
    s.channels = 1;
    s.num_cams = spatial_shape.size(0);
    s.num_levels = spatial_shape.size(1);
    s.num_groups = 1;
    s.num_anchors = 1;
    s.num_points = 1;
    s4d_errbuf err{};
    check_status(s4d_da_check_indices(&s, spatial_shape.data_ptr<int32_t>(),
                                      scale_start_index.data_ptr<int32_t>(), &err),
                 err, "index check");
}

bool built_with_cuda()
{
#ifdef S4D_WITH_CUDA
    return true;
#else
    return false;
#endif
}

// ---------------------------------------------------------------- the operator

// Index tables as the kernels take them: int32, contiguous, on features' device. The
// Python entry point hands over converted copies it caches, so this is a no-op there;
// it matters for direct calls, for traced calls (the export keeps the caller's tables)
// and under torch.compile. Tables kept on the CPU for CUDA features are checked on the
// host before the copy (the CUDA kernels only guard the F rows).
std::tuple<at::Tensor, at::Tensor> kernel_indices(const at::Tensor &features,
                                                  const at::Tensor &spatial_shape,
                                                  const at::Tensor &scale_start_index)
{
    const at::Device dev = features.device();
    if (spatial_shape.scalar_type() == at::kInt && scale_start_index.scalar_type() == at::kInt &&
        spatial_shape.device() == dev && scale_start_index.device() == dev &&
        spatial_shape.is_contiguous() && scale_start_index.is_contiguous())
        return std::make_tuple(spatial_shape, scale_start_index);
    const std::pair<const at::Tensor *, const char *> tables[] = {
        {&spatial_shape, "spatial_shape"}, {&scale_start_index, "scale_start_index"}};
    for (const auto &t : tables) {
        const at::ScalarType type = t.first->scalar_type();
        TORCH_CHECK_TYPE(type == at::kInt || type == at::kLong, "s4d deformable_aggregation: ",
                         t.second, " must be int32 or int64, got ", type);
        TORCH_CHECK_VALUE(t.first->device() == dev || t.first->is_cpu(),
                          "s4d deformable_aggregation: ", t.second, " is on ", t.first->device(),
                          "; it must be on the CPU or on features' device ", dev);
    }
    TORCH_CHECK_VALUE(spatial_shape.device() == scale_start_index.device(),
                      "s4d deformable_aggregation: spatial_shape is on ", spatial_shape.device(),
                      " but scale_start_index is on ", scale_start_index.device());
    at::Tensor ss = spatial_shape.to(at::kInt).contiguous();
    at::Tensor si = scale_start_index.to(at::kInt).contiguous();
    if (ss.device() != dev) {
        check_tensor(features, "features", 3, dev);
        da_check_indices(ss, si, features.size(1));
        ss = ss.to(dev);
        si = si.to(dev);
    }
    return std::make_tuple(ss, si);
}

at::Tensor op_forward(const at::Tensor &features, const at::Tensor &spatial_shape,
                      const at::Tensor &scale_start_index, const at::Tensor &sampling_location,
                      const at::Tensor &weights, bool deterministic)
{
    at::Tensor ss, si;
    std::tie(ss, si) = kernel_indices(features, spatial_shape, scale_start_index);
    return da_forward(features, ss, si, sampling_location, weights, deterministic);
}

// A gradient that was not asked for comes back empty (0 elements) rather than undefined:
// fake tensors and torch.compile need every output of an operator to be a tensor.
using Grads = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

Grads op_backward(const at::Tensor &features, const at::Tensor &spatial_shape,
                  const at::Tensor &scale_start_index, const at::Tensor &sampling_location,
                  const at::Tensor &weights, const at::Tensor &grad_output, bool need_features,
                  bool need_location, bool need_weights, bool deterministic)
{
    at::Tensor ss, si;
    std::tie(ss, si) = kernel_indices(features, spatial_shape, scale_start_index);
    std::vector<at::Tensor> g = da_backward(features, ss, si, sampling_location, weights,
                                            grad_output, need_features, need_location,
                                            need_weights, deterministic);
    const at::Tensor *like[] = {&features, &sampling_location, &weights};
    for (size_t i = 0; i < 3; ++i)
        if (!g[i].defined())
            g[i] = at::empty({0}, like[i]->options());
    return std::make_tuple(g[0], g[1], g[2]);
}

// The dispatcher picks the Meta kernel when any argument is on the meta device, so a
// real tensor among them is a caller's mistake, not a shape query. The index tables may
// stay on the CPU, as with real devices.
void check_meta(const at::Tensor &features, const at::Tensor &spatial_shape,
                const at::Tensor &scale_start_index, const at::Tensor &sampling_location,
                const at::Tensor &weights)
{
    const std::pair<const at::Tensor *, const char *> args[] = {
        {&features, "features"}, {&sampling_location, "sampling_location"},
        {&weights, "weights"}, {&spatial_shape, "spatial_shape"},
        {&scale_start_index, "scale_start_index"}};
    for (size_t i = 0; i < 5; ++i) {
        const at::Tensor &t = *args[i].first;
        TORCH_CHECK_VALUE(t.is_meta() || (i >= 3 && t.is_cpu()), "s4d deformable_aggregation: ",
                          args[i].second, " is on ", t.device(), " but another argument is on ",
                          "meta");
    }
}

// Shapes only, for meta and fake tensors (torch.compile, torch.export): the output sizes
// may be symbolic there, hence sym_size.
at::Tensor meta_forward(const at::Tensor &features, const at::Tensor &spatial_shape,
                        const at::Tensor &scale_start_index, const at::Tensor &sampling_location,
                        const at::Tensor &weights, bool deterministic)
{
    check_meta(features, spatial_shape, scale_start_index, sampling_location, weights);
    TORCH_CHECK_VALUE(features.dim() == 3 && sampling_location.dim() == 5,
                      "s4d deformable_aggregation: features must be [bs, F, C] and "
                      "sampling_location [bs, A, P, N, 2], got ", features.sizes(), " and ",
                      sampling_location.sizes());
    return at::empty_symint({features.sym_size(0), sampling_location.sym_size(1),
                             features.sym_size(2)},
                            features.options());
}

Grads meta_backward(const at::Tensor &features, const at::Tensor &spatial_shape,
                    const at::Tensor &scale_start_index, const at::Tensor &sampling_location,
                    const at::Tensor &weights, const at::Tensor &grad_output, bool need_features,
                    bool need_location, bool need_weights, bool deterministic)
{
    check_meta(features, spatial_shape, scale_start_index, sampling_location, weights);
    const auto grad = [](bool need, const at::Tensor &like) {
        return need ? at::empty_like(like, at::MemoryFormat::Contiguous)
                    : at::empty({0}, like.options());
    };
    return std::make_tuple(grad(need_features, features), grad(need_location, sampling_location),
                           grad(need_weights, weights));
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor &, const at::Tensor &,
                                          const at::Tensor &, const at::Tensor &,
                                          const at::Tensor &, bool)> &
forward_operator()
{
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("s4d::deformable_aggregation", "")
            .typed<at::Tensor(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                              const at::Tensor &, const at::Tensor &, bool)>();
    return op;
}

const c10::TypedOperatorHandle<Grads(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                     const at::Tensor &, const at::Tensor &, const at::Tensor &,
                                     bool, bool, bool, bool)> &
backward_operator()
{
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("s4d::deformable_aggregation_backward", "")
            .typed<Grads(const at::Tensor &, const at::Tensor &, const at::Tensor &,
                         const at::Tensor &, const at::Tensor &, const at::Tensor &, bool, bool,
                         bool, bool)>();
    return op;
}

// Input positions of the differentiable tensors, as autograd numbers the inputs.
constexpr size_t kFeatures = 0, kLocation = 3, kWeights = 4;

class DeformableAggregationFunction
    : public torch::autograd::Function<DeformableAggregationFunction> {
public:
    static at::Tensor forward(torch::autograd::AutogradContext *ctx, const at::Tensor &features,
                              const at::Tensor &spatial_shape,
                              const at::Tensor &scale_start_index,
                              const at::Tensor &sampling_location, const at::Tensor &weights,
                              bool deterministic)
    {
        ctx->saved_data["deterministic"] = deterministic;
        ctx->save_for_backward(
            {features, spatial_shape, scale_start_index, sampling_location, weights});
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        return forward_operator().call(features, spatial_shape, scale_start_index,
                                       sampling_location, weights, deterministic);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                   torch::autograd::variable_list grad_outputs)
    {
        const torch::autograd::variable_list saved = ctx->get_saved_variables();
        const at::Tensor &features = saved[0];
        const bool need_f = ctx->needs_input_grad(kFeatures);
        const bool need_l = ctx->needs_input_grad(kLocation);
        const bool need_w = ctx->needs_input_grad(kWeights);
        const at::Tensor grad_output =
            grad_outputs[0].to(features.scalar_type()).contiguous();
        // Not below autograd: with create_graph the backward operator's autograd kernel
        // (autogradNotImplementedFallback) makes a second differentiation fail loudly.
        const Grads g = backward_operator().call(
            features, saved[1], saved[2], saved[3], saved[4], grad_output, need_f, need_l,
            need_w, ctx->saved_data["deterministic"].toBool());
        return {need_f ? std::get<0>(g) : at::Tensor(), at::Tensor(), at::Tensor(),
                need_l ? std::get<1>(g) : at::Tensor(), need_w ? std::get<2>(g) : at::Tensor(),
                at::Tensor()};
    }
};

at::Tensor autograd_forward(const at::Tensor &features, const at::Tensor &spatial_shape,
                            const at::Tensor &scale_start_index,
                            const at::Tensor &sampling_location, const at::Tensor &weights,
                            bool deterministic)
{
    // Inference skips the autograd node (its context, saved tensors and edges). Forward-mode
    // tangents still go through it, which refuses them (no jvp) instead of dropping them.
    const bool backward_needed = at::GradMode::is_enabled() &&
                                 (features.requires_grad() ||
                                  sampling_location.requires_grad() || weights.requires_grad());
    const bool tangents = features._fw_grad(0).defined() ||
                          sampling_location._fw_grad(0).defined() ||
                          weights._fw_grad(0).defined();
    if (!backward_needed && !tangents) {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        return forward_operator().call(features, spatial_shape, scale_start_index,
                                       sampling_location, weights, deterministic);
    }
    return DeformableAggregationFunction::apply(features, spatial_shape, scale_start_index,
                                                sampling_location, weights, deterministic);
}

} // namespace

// Other s4d operators may add to the namespace from their own files.
TORCH_LIBRARY_FRAGMENT(s4d, m)
{
    m.def("deformable_aggregation(Tensor features, Tensor spatial_shape, "
          "Tensor scale_start_index, Tensor sampling_location, Tensor weights, "
          "bool deterministic=False) -> Tensor");
    m.def("deformable_aggregation_backward(Tensor features, Tensor spatial_shape, "
          "Tensor scale_start_index, Tensor sampling_location, Tensor weights, "
          "Tensor grad_output, bool need_features, bool need_location, bool need_weights, "
          "bool deterministic=False) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(s4d, CPU, m)
{
    m.impl("deformable_aggregation", &op_forward);
    m.impl("deformable_aggregation_backward", &op_backward);
}

#ifdef S4D_WITH_CUDA
TORCH_LIBRARY_IMPL(s4d, CUDA, m)
{
    m.impl("deformable_aggregation", &op_forward);
    m.impl("deformable_aggregation_backward", &op_backward);
}
#endif

TORCH_LIBRARY_IMPL(s4d, Meta, m)
{
    m.impl("deformable_aggregation", &meta_forward);
    m.impl("deformable_aggregation_backward", &meta_backward);
}

TORCH_LIBRARY_IMPL(s4d, Autograd, m)
{
    m.impl("deformable_aggregation", &autograd_forward);
    m.impl("deformable_aggregation_backward", torch::autograd::autogradNotImplementedFallback());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)
{
    m.doc() = "s4d op library binding (deformable aggregation)";
    m.def("da_forward", &da_forward, "deformable aggregation forward",
          py::arg("features"), py::arg("spatial_shape"), py::arg("scale_start_index"),
          py::arg("sampling_location"), py::arg("weights"), py::arg("deterministic") = false);
    m.def("da_backward", &da_backward, "deformable aggregation backward",
          py::arg("features"), py::arg("spatial_shape"), py::arg("scale_start_index"),
          py::arg("sampling_location"), py::arg("weights"), py::arg("grad_output"),
          py::arg("need_features"), py::arg("need_location"), py::arg("need_weights"),
          py::arg("deterministic") = false);
    m.def("da_check_indices", &da_check_indices, "validate the map layout on the host",
          py::arg("spatial_shape"), py::arg("scale_start_index"), py::arg("num_rows"));
    m.def("built_with_cuda", &built_with_cuda);
    m.def("cuda_available", []() { return s4d_cuda_available() != 0; });
}
