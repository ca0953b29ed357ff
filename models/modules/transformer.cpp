#include "models/modules/transformer.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>
#include <sstream>

#include "common/error.h"
#include "kernels/layer_norm.h"
#include "kernels/residual_norm.h"
#include "kernels/rope.h"
#include "models/modules/activation_checkpoint.h"
#include "models/modules/attention.h"
#include "models/modules/positions.h"
#include "models/modules/weight_init.h"
#include "models/spec/config_rules.h"

namespace segtrain::models {

namespace {

torch::nn::LayerNorm layer_norm(const ModelConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model}).eps(c.layer_norm_eps));
}

// `ln` on x, read by `reader` (kernels/layer_norm.h: where autocast's fp32 policy is skipped,
// and parameters narrower than x).
at::Tensor normed(torch::nn::LayerNorm& ln, const at::Tensor& x, kernels::NormReader reader) {
  return kernels::layer_norm(x, ln->weight, ln->bias, ln->options.eps(), reader);
}

}  // namespace

BlockImpl::BlockImpl(const ModelConfig& c)
    : layout(arch_layout(c.arch)), n_heads(c.n_heads), head_dim(head_dim_of(c)) {
  ln1 = register_module("ln1", layer_norm(c));
  ln2 = register_module("ln2", layer_norm(c));
  qkv = register_module("qkv", Projection(c.d_model, 3 * c.d_model, true));
  proj = register_module("proj", Projection(c.d_model, c.d_model, true));
  fc = register_module("fc", Projection(c.d_model, d_ff_of(c), true));
  fc_out = register_module("fc_out", Projection(d_ff_of(c), c.d_model, true));
}

Residual BlockImpl::forward(const Residual& in, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
                            const AttentionBias& bias, KvLayer* kv) {
  auto attention = [&](const at::Tensor& h) {
    const int64_t b = h.size(0), t = h.size(1), d = h.size(2);
    auto packed = qkv(h);
    at::Tensor q, k, v;
    if (layout.qkv == QkvPacking::concatenated) {
      auto parts = packed.split(d, -1);
      q = parts[0].view({b, t, n_heads, head_dim}).transpose(1, 2);
      k = parts[1].view({b, t, n_heads, head_dim}).transpose(1, 2);
      v = parts[2].view({b, t, n_heads, head_dim}).transpose(1, 2);
    } else {
      auto parts = packed.view({b, t, n_heads, 3 * head_dim}).transpose(1, 2).chunk(3, -1);
      q = parts[0], k = parts[1], v = parts[2];
    }
    if (rope_cos.defined()) {
      q = kernels::rope(q, rope_cos, rope_sin);
      k = kernels::rope(k, rope_cos, rope_sin);
    }
    if (kv) std::tie(k, v) = kv->append(k, v);
    auto y = causal_attention(q, k, v, bias);
    return proj(y.transpose(1, 2).reshape({b, t, d}));
  };
  auto mlp = [&](const at::Tensor& h) { return fc_out(fc->forward_gelu(h, /*tanh=*/!layout.exact_gelu)); };
  constexpr auto projections = kernels::NormReader::matmul;  // qkv's and fc's
  // Each residual add as the norm after it reads the sum (kernels/residual_norm.h: fused where the
  // switch says all): the last block's MLP output with ln1 here.
  const auto [x, x_normed] =
      kernels::add_layer_norm(in.stream, in.branch, ln1->weight, ln1->bias, ln1->options.eps(), projections);
  if (layout.parallel_residual) {  // x + attention + mlp, both branches reading x; ln2 reads x apart
    const at::Tensor attended = x + attention(x_normed);  // before the MLP, as transformers (an adapter's dropout)
    return {attended, mlp(normed(ln2, x, projections))};
  }
  // The attention's output with ln2.
  const auto [h, h_normed] =
      kernels::add_layer_norm(x, attention(x_normed), ln2->weight, ln2->bias, ln2->options.eps(), projections);
  return {h, mlp(h_normed)};  // the MLP's add left to the next norm
}

TransformerLMImpl::TransformerLMImpl(ModelConfig config) : config_(std::move(config)) {
  const auto& c = config_;
  check_model_config(c);
  const ArchLayout& layout = arch_layout(c.arch);
  const int64_t vocab = vocab_size_of(c);
  // A table given as its weight is not drawn (models/modules/weight_init.h).
  const auto embedding = [](int64_t rows, int64_t dim) {
    auto options = torch::nn::EmbeddingOptions(rows, dim);
    if (weight_init_skipped()) options._weight(at::empty({rows, dim}));
    return torch::nn::Embedding(options);
  };
  wte = register_module("wte", embedding(vocab, c.d_model));
  if (layout.positions == PositionScheme::learned) wpe = register_module("wpe", embedding(ape_rows(c), c.d_model));
  if (layout.embedding_norm) emb_ln = register_module("emb_ln", layer_norm(c));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layers; ++i) {
    if (layout.block == BlockKind::llama) blocks->push_back(LlamaBlock(c));
    else blocks->push_back(Block(c));
  }
  if (layout.norm == Norm::rms_norm) rms_f = register_module("ln_f", RMSNorm(c.d_model, c.layer_norm_eps));
  else ln_f = register_module("ln_f", layer_norm(c));
  if (layout.head == HeadTying::untied || (layout.head == HeadTying::by_config && !c.tie_embeddings))
    lm_head = register_module("lm_head", Projection(c.d_model, vocab, /*bias=*/false));
  if (weight_init_skipped()) return;

  // GPT-2 initialisation, residual projections scaled by 1/sqrt(2 * layers) so
  // the residual stream does not grow with depth.
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layers));
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    const bool is_norm = name.find("ln") != std::string::npos || name.find("norm") != std::string::npos;
    if (name.ends_with(".bias") || (is_norm && name.ends_with(".weight"))) {
      if (is_norm && name.ends_with(".weight")) p.fill_(1.0);
      else p.zero_();
    } else if (name.ends_with(".proj.weight") || name.ends_with("fc_out.weight") || name.ends_with("o_proj.weight") ||
               name.ends_with("down_proj.weight")) {
      p.normal_(0.0, residual_std);
    } else {
      p.normal_(0.0, 0.02);
    }
  }
}

at::Tensor TransformerLMImpl::forward(const at::Tensor& tokens, const at::Tensor& positions,
                                      const PositionBounds& bounds) {
  return logits(hidden(tokens, positions, bounds));
}

at::Tensor TransformerLMImpl::forward(const at::Tensor& tokens, const at::Tensor& positions) {
  return forward(tokens, positions, PositionBounds::of(positions));
}

at::Tensor TransformerLMImpl::hidden(const at::Tensor& tokens, const at::Tensor& positions) {
  return hidden(tokens, positions, PositionBounds::of(positions));
}

at::Tensor TransformerLMImpl::head_weight() const { return lm_head ? lm_head->weight : wte->weight; }

at::Tensor TransformerLMImpl::logits(const at::Tensor& hidden) {
  return lm_head ? lm_head(hidden) : at::linear(hidden, wte->weight);
}

at::Tensor TransformerLMImpl::hidden(const at::Tensor& tokens, const at::Tensor& positions,
                                     const PositionBounds& bounds) {
  return run_blocks(tokens, positions, bounds, nullptr);
}

at::Tensor TransformerLMImpl::decode(const at::Tensor& tokens, const at::Tensor& positions, KvCache& cache) {
  if (cache.layers.empty()) {
    cache.layers.resize(blocks->size());
    for (auto& layer : cache.layers) layer.reserved = cache.reserved_tokens;
  }
  const auto bounds = PositionBounds::of(positions);
  auto out = run_blocks(tokens, positions, bounds, &cache);
  cache.positions = cache.positions.defined() ? at::cat({cache.positions, positions}, 1) : positions;
  cache.end = std::max(cache.end, bounds.end);
  return out;
}

void TransformerLMImpl::check_positions(const PositionBounds& bounds) const {
  if (position_scheme(config_.arch) != PositionScheme::learned) return;
  const int64_t rows = wpe->weight.size(0);
  if (bounds.end > rows || bounds.lowest < 0)
    throw InputError("position id " + std::to_string(bounds.lowest < 0 ? bounds.lowest : bounds.end - 1) +
                     " is outside the learned position table (" + std::to_string(rows) + " rows" +
                     (config_.extension.method == ExtensionMethod::none
                          ? "); set model.extension.method=interpolate with a factor to extend it"
                          : ")"));
}

at::Tensor TransformerLMImpl::run_blocks(const at::Tensor& tokens, const at::Tensor& positions,
                                         const PositionBounds& bounds, KvCache* cache) {
  const auto& c = config_;
  const int64_t read = cache ? cache->length() : 0;
  if (tokens.dim() != 2 || positions.sizes() != tokens.sizes())
    throw InputError("TransformerLM.forward: tokens and positions must both be [B, T]; got " +
                     std::to_string(tokens.dim()) + "-d tokens and positions of a different shape");
  const auto scheme = position_scheme(c.arch);
  // The largest position id + 1, where the table or the scaling depends on it (models/spec/auto_values.h).
  const bool need_length = scheme == PositionScheme::learned || positions_depend_on_length(c);
  const int64_t seq_len = need_length ? std::max(bounds.end, cache ? cache->end : 0) : tokens.size(1);

  auto x = wte(tokens);
  at::Tensor cos, sin;
  AttentionBias bias;
  if (scheme == PositionScheme::learned) {
    check_positions({bounds.lowest, seq_len, bounds.rows_share_positions});
    x = x + wpe(positions);
  } else if (scheme == PositionScheme::rope) {
    auto rope = rope_params(c, seq_len);
    auto inv_freq = rope_table_.on(rope.inv_freq, positions.device());
    auto freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.view({1, 1, -1});
    auto angles = at::cat({freqs, freqs}, -1).unsqueeze(1);  // [B, 1, T, rotary_dim]
    cos = angles.cos() * rope.attention_scale;
    sin = angles.sin() * rope.attention_scale;
  } else if (read == 0) {
    // Samples that share their position ids (evaluation) share one bias.
    const auto bias_positions = bounds.rows_share_positions ? positions.slice(0, 0, 1) : positions;
    const auto host_slopes = alibi_slopes_for(c, seq_len);
    const auto slopes = alibi_table_.on(host_slopes, positions.device());
    if (folds_alibi(positions.device(), head_dim_of(c), bounds, host_slopes))
      bias.folded = fold_alibi(bias_positions, slopes, head_dim_of(c), at::kBFloat16);
    else
      bias.mask = alibi_causal_mask(bias_positions, slopes);
  }
  if (read > 0)  // the new tokens after those read: causal from where they start (and ALiBi's bias)
    bias.mask = causal_mask_after_read(
        positions, at::cat({cache->positions, positions}, 1),
        scheme == PositionScheme::alibi ? alibi_table_.on(alibi_slopes_for(c, seq_len), positions.device())
                                        : at::Tensor());
  if (emb_ln) x = normed(emb_ln, x, kernels::NormReader::other);

  if (c.sliding_window && read + tokens.size(1) > *c.sliding_window)
    throw InputError("a sequence of " + std::to_string(read + tokens.size(1)) + " tokens is longer than the model's "
                     "sliding_window (" + std::to_string(*c.sliding_window) +
                     ", from its config.json); segtrain does not implement sliding-window attention");
  Residual stream{x, {}};
  const auto recomputed = static_cast<size_t>(c.activation_checkpointing.of(static_cast<int64_t>(blocks->size())));
  for (size_t i = 0; i < blocks->size(); ++i) {
    const auto module = blocks->ptr(i);
    auto block = module->as<DecoderBlock>();
    if (cache) {
      stream = block->forward(stream, cos, sin, bias, &cache->layers[i]);
    } else if (i < recomputed && is_training()) {
      // One tensor kept a block, the whole stream: a pending branch would be a second.
      auto holder = std::dynamic_pointer_cast<DecoderBlock>(module);
      const auto parameters = module->parameters();
      const bool trains =
          std::any_of(parameters.begin(), parameters.end(), [](const at::Tensor& p) { return p.requires_grad(); });
      stream = {checkpointed([holder, cos, sin,
                              bias](const at::Tensor& h) { return holder->forward({h, {}}, cos, sin, bias).whole(); },
                             stream.whole(), trains),
                {}};
    } else {
      stream = block->forward(stream, cos, sin, bias);
    }
  }
  // The last block's pending add goes with the final norm (its LayerNorm keeps autocast's fp32: the
  // head reads it in fp32, so it is not fused; an RMSNorm is where the switch says all).
  if (ln_f)
    return kernels::add_layer_norm(stream.stream, stream.branch, ln_f->weight, ln_f->bias, ln_f->options.eps(),
                                   kernels::NormReader::other)
        .normed;
  return kernels::add_rms_norm(stream.stream, stream.branch, rms_f->weight, rms_f->eps).normed;
}

void TransformerLMImpl::load_tensors(const TensorSources& tensors, const std::string& source, bool strict,
                                     WeightDtype dtype) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    auto it = tensors.find(name);
    if (it == tensors.end()) throw InputError(source + ": missing tensor for " + name);
    used.insert(name);
    at::Tensor value = it->second();
    if (name == "wpe.weight" && value.dim() == 2 && value.size(0) != p.size(0) &&
        config_.extension.method == ExtensionMethod::interpolate && value.size(0) == original_length_of(config_))
      value = interpolate_ape_table(value.to(at::kFloat), p.size(0));
    if (value.sizes() != p.sizes()) {
      std::ostringstream msg;
      msg << source << ": tensor " << name << " has shape " << value.sizes() << ", expected " << p.sizes();
      throw InputError(msg.str());
    }
    // As stored: the tensor read becomes the parameter (its placeholder was never touched).
    if (dtype == WeightDtype::as_stored && value.device() == p.device() && value.is_contiguous())
      p.set_data(value);
    else
      p.copy_(value);  // into the parameter's own dtype
  }
  if (strict)
    for (const auto& [name, value] : tensors)
      if (!used.count(name)) throw InputError(source + ": unexpected tensor " + name + " for this model config");
}

std::map<std::string, at::Tensor> TransformerLMImpl::tensors() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : named_parameters()) out[item.key()] = item.value().detach();
  return out;
}

}  // namespace segtrain::models
