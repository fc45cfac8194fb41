// The checkpoint harness's pieces that its seeds and tests share.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "harnesses.h"
#include "strata/train/trainer.h"

namespace strata::fuzz {

// The run the harness resumes: a tiny model (8 wide, one layer) on a fixed
// text. Its seeds are checkpoints of this run; other options would be
// rejected before anything else is read.
train::TrainOptions CheckpointOptions();
train::Corpus CheckpointCorpus();

// A directory's regular files as one input: for each file, a line
// "<relative path> <size>\n" and then its bytes.
std::vector<uint8_t> PackDirectory(const std::filesystem::path& dir);

// Unpacks `input` into a fresh directory and resumes from it, with
// fall-back for half of the inputs (by their hash). Returns whether a
// trainer resumed; false also when the input is not a well-formed pack.
bool ResumeFromPacked(Bytes input);

}  // namespace strata::fuzz
