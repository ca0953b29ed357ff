#pragma once
// A backward graph's nodes, walked from its root: how the model tests see which autograd nodes a
// forward recorded (a fused kernel's, an activation checkpoint's). Raw pointers: LibTorch 2.13 holds
// nodes in intrusive_ptr, 2.11 in shared_ptr.
#include <torch/csrc/autograd/function.h>

#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

namespace segtrain::test {

// Calls `visit` once for each node reachable from `root`.
inline void for_each_node(torch::autograd::Node* root, const std::function<void(torch::autograd::Node&)>& visit) {
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{root};
  while (!todo.empty()) {
    torch::autograd::Node* node = todo.back();
    todo.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    visit(*node);
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
}

// How many nodes reachable from `root` have `part` in their name ("AddNormNode", "CheckpointBackward").
inline int count_nodes_named(torch::autograd::Node* root, const std::string& part) {
  int count = 0;
  for_each_node(root, [&](torch::autograd::Node& node) { count += node.name().find(part) != std::string::npos; });
  return count;
}

}  // namespace segtrain::test
