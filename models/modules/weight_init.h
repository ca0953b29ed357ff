#pragma once
// A model built to be loaded draws no random numbers for the weights its file then
// fills (as transformers' no_init_weights): while a SkipWeightInit lives on this thread,
// TransformerLM and its modules allocate their parameters without writing them, so
// their pages are never touched before the file's values replace them.
namespace segtrain::models {

class SkipWeightInit {
 public:
  SkipWeightInit();
  ~SkipWeightInit();
  SkipWeightInit(const SkipWeightInit&) = delete;
  SkipWeightInit& operator=(const SkipWeightInit&) = delete;

 private:
  bool previous_;
};

// Whether a SkipWeightInit lives on this thread.
bool weight_init_skipped();

}  // namespace segtrain::models
