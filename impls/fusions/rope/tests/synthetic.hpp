// Synthetic RoPE forward graphs for the rope tests, written as Hugging Face's apply_rotary_pos_emb
// decomposes (and GPT-J's rotate_every_two for the interleaved style): q [B, T, H, D] permuted to
// [B, H, T, D], cos / sin [B, T, R] unsqueezed to [B, 1, T, R], the first R of the head rotated
// (x * cos + rot(x) * sin), the rest appended by a cat (partial rotary). Any head and rotary dim
// (72, 80, 96; 20, 32: the shapes whose rotate-half half is not a multiple of 8), either style,
// bfloat16 / float16 / float32 activations and tables.
#pragma once

#include <string>
#include <vector>

#include "tests/unit/test_util.hpp"

namespace replay::test {

struct RopeForm {
  int64_t B = 2, T = 16, H = 4, D = 72, R = 72;
  bool interleaved = false;
  std::string dtype = "bfloat16";        ///< q
  std::string table_dtype = "bfloat16";  ///< cos / sin
};

inline std::string promote_name(const std::string& a, const std::string& b) {
  if (a == b) return a;
  if (a == "float32" || b == "float32") return "float32";
  return "float32";  // bfloat16 with float16
}

inline nlohmann::json rope_trace_json(const RopeForm& f,
                                      const std::string& name = "synthetic_rope") {
  using nlohmann::json;
  const int64_t B = f.B, T = f.T, H = f.H, D = f.D, R = f.R, h = R / 2;
  const std::string dt = f.dtype, tdt = f.table_dtype, pdt = promote_name(dt, tdt);
  json nodes = json::array();
  auto node = [&](const std::string& id, const char* op, json args, json out) {
    nodes.push_back(
        {{"id", id}, {"op", op}, {"args", args}, {"kwargs", json::object()}, {"outputs", {out}}});
  };
  auto strided = [](std::vector<int64_t> sh, std::vector<int64_t> st, const std::string& dt,
                    int64_t offset = 0) {
    json j{{"shape", sh}, {"stride", st}, {"dtype", dt}};
    if (offset) j["storage_offset"] = offset;
    return j;
  };
  const int64_t kEnd = 9223372036854775807LL;
  // q [B, T, H, D] -> [B, H, T, D]: strides [T*H*D, D, H*D, 1]
  const std::vector<int64_t> qs = {T * H * D, D, H * D, 1};
  node("permute", "aten.permute.default", {test::ref("q"), {0, 2, 1, 3}},
       strided({B, H, T, D}, qs, dt));
  node("cos_u", "aten.unsqueeze.default", {test::ref("cos"), 1},
       strided({B, 1, T, R}, {T * R, T * R, R, 1}, tdt));
  node("sin_u", "aten.unsqueeze.default", {test::ref("sin"), 1},
       strided({B, 1, T, R}, {T * R, T * R, R, 1}, tdt));
  std::string x = "permute";
  if (R < D) {
    x = "x_rot";
    node("x_rot", "aten.slice.Tensor", {test::ref("permute"), 3, 0, R},
         strided({B, H, T, R}, qs, dt));
    node("x_pass", "aten.slice.Tensor", {test::ref("permute"), 3, R, kEnd},
         strided({B, H, T, D - R}, qs, dt, R));
  }
  node("mul_cos", "aten.mul.Tensor", {test::ref(x), test::ref("cos_u")}, tensor({B, H, T, R}, pdt));
  if (!f.interleaved) {
    node("x1", "aten.slice.Tensor", {test::ref(x), 3, 0, h}, strided({B, H, T, h}, qs, dt));
    node("x2", "aten.slice.Tensor", {test::ref(x), 3, h, R}, strided({B, H, T, h}, qs, dt, h));
    node("neg", "aten.neg.default", {test::ref("x2")}, tensor({B, H, T, h}, dt));
    node("rot", "aten.cat.default", {json::array({test::ref("neg"), test::ref("x1")}), -1},
         tensor({B, H, T, R}, dt));
  } else {
    const std::vector<int64_t> es = {qs[0], qs[1], qs[2], 2};
    node("x_even", "aten.slice.Tensor", {test::ref(x), 3, 0, kEnd, 2},
         strided({B, H, T, h}, es, dt));
    node("x_odd", "aten.slice.Tensor", {test::ref(x), 3, 1, kEnd, 2},
         strided({B, H, T, h}, es, dt, 1));
    node("neg", "aten.neg.default", {test::ref("x_odd")}, tensor({B, H, T, h}, dt));
    node("neg_u", "aten.unsqueeze.default", {test::ref("neg"), 4},
         strided({B, H, T, h, 1}, {H * T * h, T * h, h, 1, 1}, dt));
    node("even_u", "aten.unsqueeze.default", {test::ref("x_even"), 4},
         strided({B, H, T, h, 1}, {qs[0], qs[1], qs[2], 2, 1}, dt));
    node("pairs", "aten.cat.default", {json::array({test::ref("neg_u"), test::ref("even_u")}), -1},
         tensor({B, H, T, h, 2}, dt));
    node("rot", "aten.view.default", {test::ref("pairs"), {B, H, T, R}}, tensor({B, H, T, R}, dt));
  }
  node("mul_sin", "aten.mul.Tensor", {test::ref("rot"), test::ref("sin_u")},
       tensor({B, H, T, R}, pdt));
  node("out", "aten.add.Tensor", {test::ref("mul_cos"), test::ref("mul_sin")},
       tensor({B, H, T, R}, pdt));
  std::string out = "out";
  if (R < D) {
    out = "out_full";
    node("out_full", "aten.cat.default", {json::array({test::ref("out"), test::ref("x_pass")}), -1},
         tensor({B, H, T, D}, pdt));
  }
  json inputs = json::array();
  json q = tensor({B, T, H, D}, dt);
  q["id"] = "q";
  inputs.push_back(q);
  for (const char* t : {"cos", "sin"}) {
    json in = tensor({B, T, R}, tdt);
    in["id"] = t;
    in["stats"] = {{"mean", 0.0}, {"std", 0.6}, {"min", -1.0}, {"max", 1.0}};
    inputs.push_back(in);
  }
  return {{"schema", "replay-trace/1"},
          {"name", name},
          {"source", {{"model", "synthetic"}, {"phase", "fwd"}}},
          {"world_size", 1},
          {"inputs", inputs},
          {"nodes", nodes},
          {"outputs", {out}}};
}

}  // namespace replay::test
