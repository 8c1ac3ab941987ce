// Why the chunked pipelines of ag_matmul and matmul_rs decline a run (no device needed): a
// single-process run, a run of another world size, nccl_chunked without a communicator (ranks
// sharing a GPU), rows that do not split into world_size chunks, a dtype the chunk GEMM or the
// partials' sum does not take.
#include <gtest/gtest.h>

#include "impls/fusions/ag_matmul/pipeline.hpp"
#include "impls/fusions/matmul_rs/pipeline.hpp"

namespace replay {
namespace {

DistContext shared_gpu_dist(int world_size) {
  DistContext d;
  d.rank = 0;
  d.world_size = world_size;
  d.shared_device = true;
  d.no_nccl_why = "2 ranks share GPU 0";
  d.all_gather = [](const std::string& b) { return std::vector<std::string>{b, b}; };
  d.barrier = [] {};
  return d;
}

ag_matmul::PipelineOperands ag_bf16(int64_t M) {
  ag_matmul::PipelineOperands op;
  op.M = M;
  op.gemm.K = op.gemm.N = 64;
  op.gemm.b = device_tensor(nullptr, TensorMeta{{64, 64}, {64, 1}, DType::kBFloat16});
  return op;
}

TEST(TpPipelineUnsupported, SingleProcessRunNamesTheMultiProcessPath) {
  const std::string why =
      ag_matmul::Pipeline::unsupported(nullptr, tp::Transport::kIpc, ag_bf16(128));
  EXPECT_NE(why.find("needs a multi-process run"), std::string::npos) << why;
  EXPECT_NE(why.find("single process"), std::string::npos) << why;
  matmul_rs::PipelineOperands rs;
  rs.M = 128;
  EXPECT_NE(matmul_rs::Pipeline::unsupported(nullptr, tp::Transport::kNccl, rs)
                .find("needs a multi-process run"),
            std::string::npos);
}

TEST(TpPipelineUnsupported, NcclChunkedWithoutCommunicatorSaysWhy) {
  const DistContext d = shared_gpu_dist(2);
  const std::string why = tp::dist_unsupported(&d, 2, tp::Transport::kNccl);
  EXPECT_NE(why.find("needs an NCCL communicator"), std::string::npos) << why;
  EXPECT_NE(why.find("2 ranks share GPU 0"), std::string::npos) << why;
  EXPECT_EQ(tp::dist_unsupported(&d, 2, tp::Transport::kIpc), "");
}

TEST(TpPipelineUnsupported, WorldSizeRowsAndDtypes) {
  const DistContext d = shared_gpu_dist(2);
  EXPECT_NE(tp::dist_unsupported(&d, 4, tp::Transport::kIpc).find("group has 4 ranks, the run 2"),
            std::string::npos);
  EXPECT_EQ(ag_matmul::Pipeline::unsupported(&d, tp::Transport::kIpc, ag_bf16(128)), "");
  EXPECT_NE(ag_matmul::Pipeline::unsupported(&d, tp::Transport::kIpc, ag_bf16(129))
                .find("not a multiple of the world size 2"),
            std::string::npos);
  ag_matmul::PipelineOperands f32 = ag_bf16(128);
  f32.gemm.a_dtype = f32.gemm.out_dtype = DType::kFloat32;
  EXPECT_NE(ag_matmul::Pipeline::unsupported(&d, tp::Transport::kIpc, f32)
                .find("bfloat16 or float16 operands"),
            std::string::npos);
  matmul_rs::PipelineOperands rs;
  rs.M = 128;
  rs.gemm = ag_bf16(128).gemm;
  EXPECT_EQ(matmul_rs::Pipeline::unsupported(&d, tp::Transport::kIpc, rs), "");
  rs.gemm.out_dtype = DType::kFloat8E4M3;
  EXPECT_NE(matmul_rs::Pipeline::unsupported(&d, tp::Transport::kIpc, rs)
                .find("bfloat16, float16 or float32"),
            std::string::npos);
  // Row blocks (the split/cat form): M a multiple of world size x blocks; float8 rowwise scales
  // of blocks whose rows are not a multiple of 4 are refused (their scale vectors misaligned).
  ag_matmul::PipelineOperands blocks = ag_bf16(128);
  blocks.lead = 3;
  EXPECT_NE(ag_matmul::Pipeline::unsupported(&d, tp::Transport::kIpc, blocks)
                .find("times the blocks per shard 3"),
            std::string::npos);
  ag_matmul::PipelineOperands f8 = ag_bf16(2 * 2 * 6);  // 2 blocks of 6 rows per shard
  f8.lead = 2;
  f8.gemm.scaled = f8.gemm.rowwise = true;
  f8.gemm.a_dtype = DType::kFloat8E4M3;
  f8.gemm.b = device_tensor(nullptr, TensorMeta{{64, 64}, {1, 64}, DType::kFloat8E4M3});
  EXPECT_NE(ag_matmul::Pipeline::unsupported(&d, tp::Transport::kIpc, f8)
                .find("rowwise scales of chunks of 6 rows"),
            std::string::npos);
}

// matmul_rs's pieces per chunk: the row blocks when a shard has several; else 4, 2 or 1 pieces
// of >= 32 rows, each a multiple of 16 (float8 rowwise scales stay 16-byte aligned).
TEST(TpPipelinePieces, MatmulRsSplitsChunksIntoAlignedPieces) {
  EXPECT_EQ(matmul_rs::Pipeline::pieces(8192, 1), 4);  // Llama-3-8B at world size 2: 2048 rows
  EXPECT_EQ(matmul_rs::Pipeline::pieces(128, 1), 4);
  EXPECT_EQ(matmul_rs::Pipeline::pieces(64, 1), 2);
  EXPECT_EQ(matmul_rs::Pipeline::pieces(96, 1), 2);  // 24 rows a quarter: not a multiple of 16
  EXPECT_EQ(matmul_rs::Pipeline::pieces(48, 1), 1);
  EXPECT_EQ(matmul_rs::Pipeline::pieces(8, 1), 1);
  EXPECT_EQ(matmul_rs::Pipeline::pieces(64, 2), 2);  // the split/cat form: one piece per block
}

}  // namespace
}  // namespace replay
