// Buffer donation: a sync writes results into the buffers of device data
// that nothing else can still read (an optimizer step's old weights), and
// never into one that something can.
#include <gtest/gtest.h>

#include "strata/lazy/context.h"
#include "strata/lazy/ops.h"

namespace strata {
namespace {

using lazy::Context;

class Donation : public ::testing::Test {
 protected:
  void SetUp() override {
    Context::Get().set_buffer_donation(true);
    Context::Get().ResetMetrics();
  }
  void TearDown() override { Context::Get().set_buffer_donation(false); }
  static const uint8_t* Data(const Tensor& t) { return t.value().node->buffer().data(); }
  static int64_t Donated() { return Context::Get().metrics().bytes_donated.load(); }
};

std::vector<float> Iota(int64_t n, float scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * scale;
  return v;
}

TEST_F(Donation, AnUpdatedWeightReusesItsOldBuffer) {
  const int64_t n = 1 << 16;
  Tensor w = Tensor::FromVector(Iota(n, 0.5f), {n});
  Tensor m = Tensor::FromVector(Iota(n, 0.25f), {n});
  const uint8_t* w_bytes = Data(w);
  const uint8_t* m_bytes = Data(m);
  // An SGD-with-momentum-like step: both tensors are rebound to new values.
  m = m * 0.9 + w * 0.1;
  w = w - m * 0.01;
  std::vector<Tensor*> both = {&w, &m};
  sync(both);
  // The reference, worked out on floats.
  std::vector<float> w0 = Iota(n, 0.5f), m0 = Iota(n, 0.25f);
  std::vector<float> got_w = w.to_vector<float>(), got_m = m.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    float mi = m0[i] * 0.9f + w0[i] * 0.1f;
    ASSERT_FLOAT_EQ(got_m[i], mi) << i;
    ASSERT_FLOAT_EQ(got_w[i], w0[i] - mi * 0.01f) << i;
  }
  // At least one result took an old buffer (which ones is the planner's
  // business: a result may take a buffer only after its last read).
  EXPECT_GE(Donated(), n * 4);
  EXPECT_TRUE(Data(w) == w_bytes || Data(w) == m_bytes || Data(m) == w_bytes || Data(m) == m_bytes);
}

TEST_F(Donation, AnElementwiseUpdateWritesOverWhatItReads) {
  const int64_t n = 4096;
  Tensor w = Tensor::FromVector(Iota(n, 1.0f), {n});
  const uint8_t* before = Data(w);
  for (int step = 1; step <= 3; ++step) {
    w = w * 2.0;  // reads each element, then writes it
    w.sync();
    EXPECT_EQ(Data(w), before) << step;
  }
  EXPECT_EQ(w.to_vector<float>(), Iota(n, 8.0f));
  EXPECT_EQ(Donated(), 3 * n * 4);
}

TEST_F(Donation, ABufferSomethingElseCanReadIsNeverDonated) {
  const int64_t n = 1024;
  // 1. Another handle still holds the old value.
  Tensor w = Tensor::FromVector(Iota(n, 1.0f), {n});
  Tensor old = w;
  w = w * 2.0;
  w.sync();
  EXPECT_EQ(old.to_vector<float>(), Iota(n, 1.0f));
  EXPECT_EQ(w.to_vector<float>(), Iota(n, 2.0f));
  // 2. A pending value not being synced reads the old buffer.
  Tensor v = Tensor::FromVector(Iota(n, 1.0f), {n});
  Tensor pending = v * 3.0;
  v = v + 1.0;
  v.sync();
  EXPECT_EQ(Donated(), 0);
  // Now only `pending` reads the old buffer: its own sync may reuse it.
  EXPECT_EQ(pending.to_vector<float>(), Iota(n, 3.0f));
  // 3. A tensor whose buffer is an argument twice over (shared bytes).
  Tensor a = Tensor::FromVector(Iota(n, 1.0f), {n});
  Tensor b = a + 0.0;
  b.sync();
  Context::Get().ResetMetrics();
  Tensor a_view = a;  // another handle to a's node
  a = a * 2.0;
  a.sync();
  EXPECT_EQ(a_view.to_vector<float>(), Iota(n, 1.0f));
  EXPECT_EQ(Donated(), 0);
}

TEST_F(Donation, OffByDefaultOutsideTheScope) {
  Context::Get().set_buffer_donation(false);
  const int64_t n = 256;
  Tensor w = Tensor::FromVector(Iota(n, 1.0f), {n});
  const uint8_t* before = Data(w);
  w = w * 2.0;
  w.sync();
  EXPECT_NE(Data(w), before);
  EXPECT_EQ(Donated(), 0);
}

}  // namespace
}  // namespace strata
