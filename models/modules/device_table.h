#pragma once
// A small positional table (RoPE's inverse frequencies, ALiBi's slopes) kept on the device the
// forward runs on. The tables are computed on the host from the config and the sequence length
// (models/modules/positions.h); copied to a GPU at every forward they would be a pageable host-to-device
// copy each time, which the driver may synchronise. A DeviceTable uploads again only when the host
// table changes (a dynamic scaling's next length) or the device does.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <mutex>

namespace segtrain::models {

class DeviceTable {
 public:
  // `host` on `device` as fp32: the copy kept from an earlier call when `host` equals its table.
  at::Tensor on(const at::Tensor& host, const c10::Device& device);
  // How many times a table went to the device (tests; a forward at one length uploads once).
  int64_t uploads() const;

 private:
  mutable std::mutex mutex_;  // activation checkpointing recomputes on autograd's thread
  at::Tensor host_, device_copy_;
  int64_t uploads_ = 0;
};

}  // namespace segtrain::models
