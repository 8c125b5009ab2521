#include "worker/model/llama_model.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace pagoda::worker {
namespace {

using common::GgufFile;
using common::GgufTensor;

// Finds `name` and requires GGUF dims exactly `dims` (innermost first).
absl::StatusOr<const GgufTensor*> FindTensor(const GgufFile& file, const std::string& name,
                                             const std::vector<int64_t>& dims) {
  const GgufTensor* t = file.FindTensor(name);
  if (t == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model is missing tensor '", name, "'"));
  }
  if (t->dims != dims) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has dims [", absl::StrJoin(t->dims, ", "),
                     "], expected [", absl::StrJoin(dims, ", "), "] from the model config"));
  }
  return t;
}

// A matrix in its stored type.
absl::StatusOr<WeightMatrix> LoadMatrix(const GgufFile& file, const std::string& name,
                                        const std::vector<int64_t>& dims) {
  ASSIGN_OR_RETURN(const GgufTensor* t, FindTensor(file, name, dims));
  return CopyWeightMatrix(*t);
}

// A vector (norm weights), converted to float32.
absl::StatusOr<std::vector<float>> LoadVector(const GgufFile& file, const std::string& name,
                                              int64_t size) {
  ASSIGN_OR_RETURN(WeightMatrix m, LoadMatrix(file, name, {size}));
  return m.ToFloat();
}

// A tensor of `file` as float32, for the architecture hooks (architecture.h).
TensorLoader LoaderFor(const GgufFile& file) {
  return [&file](const std::string& name,
                 const std::vector<int64_t>& dims) -> absl::StatusOr<std::vector<float>> {
    ASSIGN_OR_RETURN(WeightMatrix m, LoadMatrix(file, name, dims));
    return m.ToFloat();
  };
}

}  // namespace

absl::StatusOr<std::shared_ptr<const LlamaModel>> LlamaModel::Load(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  auto model = Load(*file);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("'", path, "': ", model.status().message()));
  }
  return model;
}

absl::StatusOr<std::shared_ptr<const LlamaModel>> LlamaModel::Load(const GgufFile& file) {
  std::shared_ptr<LlamaModel> m(new LlamaModel());
  ASSIGN_OR_RETURN(m->config_, common::ReadModelConfig(file));
  m->fingerprint_ = file.Fingerprint();
  const common::ModelConfig& c = m->config_;
  ASSIGN_OR_RETURN(m->token_embd_, LoadMatrix(file, "token_embd.weight", {c.dim, c.vocab_size}));
  ASSIGN_OR_RETURN(m->output_norm_, LoadVector(file, "output_norm.weight", c.dim));
  m->tied_output_ = file.FindTensor("output.weight") == nullptr;
  if (!m->tied_output_) {
    ASSIGN_OR_RETURN(m->output_, LoadMatrix(file, "output.weight", {c.dim, c.vocab_size}));
  }
  ASSIGN_OR_RETURN(m->rope_inv_freq_, RopeInvFrequencies(file, LoaderFor(file), c));
  m->layers_.resize(static_cast<size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) RETURN_IF_ERROR(m->LoadLayer(file, l));
  return std::shared_ptr<const LlamaModel>(std::move(m));
}

absl::Status LlamaModel::LoadLayer(const GgufFile& file, int index) {
  const common::ModelConfig& c = config_;
  const std::string p = absl::StrCat("blk.", index, ".");
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.ffn_dim;
  LlamaLayerWeights& w = layers_[static_cast<size_t>(index)];
  ASSIGN_OR_RETURN(w.attn_norm, LoadVector(file, p + "attn_norm.weight", dim));
  ASSIGN_OR_RETURN(w.wq, LoadMatrix(file, p + "attn_q.weight", {dim, q_dim}));
  ASSIGN_OR_RETURN(w.wk, LoadMatrix(file, p + "attn_k.weight", {dim, kv_dim}));
  ASSIGN_OR_RETURN(w.wv, LoadMatrix(file, p + "attn_v.weight", {dim, kv_dim}));
  ASSIGN_OR_RETURN(w.wo, LoadMatrix(file, p + "attn_output.weight", {q_dim, dim}));
  ASSIGN_OR_RETURN(w.ffn_norm, LoadVector(file, p + "ffn_norm.weight", dim));
  ASSIGN_OR_RETURN(w.w_gate, LoadMatrix(file, p + "ffn_gate.weight", {dim, ffn}));
  ASSIGN_OR_RETURN(w.w_up, LoadMatrix(file, p + "ffn_up.weight", {dim, ffn}));
  ASSIGN_OR_RETURN(w.w_down, LoadMatrix(file, p + "ffn_down.weight", {ffn, dim}));
  return LoadArchitectureLayer(LoaderFor(file), c, index, w.wq, w.wk, w.arch);
}

size_t LlamaModel::weight_bytes() const {
  size_t n = token_embd_.num_bytes() + output_norm_.size() * sizeof(float) + output_.num_bytes();
  for (const LlamaLayerWeights& w : layers_) {
    n += (w.attn_norm.size() + w.ffn_norm.size()) * sizeof(float) + w.wq.num_bytes() +
         w.wk.num_bytes() + w.wv.num_bytes() + w.wo.num_bytes() + w.w_gate.num_bytes() +
         w.w_up.num_bytes() + w.w_down.num_bytes() +
         (w.arch.bq.size() + w.arch.bk.size() + w.arch.bv.size() + w.arch.q_norm.size() +
          w.arch.k_norm.size()) *
             sizeof(float);
  }
  return n;
}

}  // namespace pagoda::worker
