#pragma once
// Helpers for the emulator tests: run a test under each thread order.
#include <gtest/gtest.h>

#include <string>

#include "kernels/emu/emu.h"

namespace tarn::emu::testing {

// Sets the emulator's thread order for the scope, restoring the previous one after.
class OrderScope {
 public:
  explicit OrderScope(ThreadOrder order) : saved_(thread_order()) { set_thread_order(order); }
  ~OrderScope() { set_thread_order(saved_); }
  OrderScope(const OrderScope&) = delete;
  OrderScope& operator=(const OrderScope&) = delete;

 private:
  ThreadOrder saved_;
};

constexpr ThreadOrder kAllOrders[] = {ThreadOrder::forward, ThreadOrder::reverse, ThreadOrder::random};

inline std::string OrderName(const ::testing::TestParamInfo<ThreadOrder>& info) {
  return thread_order_name(info.param);
}

// The message of the tarn::Error that `f` throws, or "" when it throws none.
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace tarn::emu::testing
