// The image classifiers: parameter counts against torchvision's published
// counts or counts derived by hand from the layouts in docs/models.md, output
// shapes, gradients, initialisation, and the errors for bad configurations.
// Forward passes stay small (batch 1-2, ResNet-50 only at 64x64) for 2 cores.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "lockstep/common/error.h"
#include "lockstep/models/vision.h"

namespace lockstep {
namespace {

ImageModelOptions opts(int64_t channels, int64_t side, int64_t classes) {
  ImageModelOptions o;
  o.inChannels = channels;
  o.imageSize = side;
  o.numClasses = classes;
  return o;
}

/// weight + bias of a layer.
int64_t dense(int64_t in, int64_t out) { return in * out + out; }
int64_t conv(int64_t in, int64_t out, int64_t k) { return in * out * k * k + out; }

std::set<std::string> parameterNames(const torch::nn::Module& m) {
  std::set<std::string> out;
  for (const auto& item : m.named_parameters()) out.insert(item.key());
  return out;
}

/// The message of the ConfigError that makeImageModel throws, or "" when it throws none.
std::string configErrorOf(const std::string& type, const ImageModelOptions& o) {
  try {
    makeImageModel(type, o);
  } catch (const ConfigError& e) { return e.what(); }
  return "";
}

TEST(VisionModels, TypesAreListed) {
  auto types = imageModelTypes();
  std::vector<std::string> expected = {"convnet", "mlp", "alexnet", "alexnet-cifar", "resnet18", "resnet50"};
  EXPECT_EQ(types, expected);
}

TEST(VisionModels, ConvNetParameterCount) {
  // 1x28x28, 10 classes: conv 1->32 3x3 (320) + conv 32->64 3x3 (18,496)
  // + fc 64*7*7 -> 128 (401,536) + fc 128 -> 10 (1,290) = 421,642.
  int64_t byHand = conv(1, 32, 3) + conv(32, 64, 3) + dense(64 * 7 * 7, 128) + dense(128, 10);
  ASSERT_EQ(byHand, 421642);
  EXPECT_EQ(countParameters(*makeImageModel("convnet", opts(1, 28, 10))), 421642);
  // 3x32x32: the first fc sees 64*8*8.
  EXPECT_EQ(countParameters(*makeImageModel("convnet", opts(3, 32, 10))),
            conv(3, 32, 3) + conv(32, 64, 3) + dense(64 * 8 * 8, 128) + dense(128, 10));
}

TEST(VisionModels, MlpParameterCount) {
  // 784 -> 512 (401,920) -> 256 (131,328) -> 10 (2,570) = 535,818.
  EXPECT_EQ(countParameters(*makeImageModel("mlp", opts(1, 28, 10))), 535818);
  EXPECT_EQ(countParameters(*makeImageModel("mlp", opts(3, 32, 100))),
            dense(3 * 32 * 32, 512) + dense(512, 256) + dense(256, 100));
}

TEST(VisionModels, MlpHiddenSizesAreConfigurable) {
  // configs/mlp-bench.yaml: 784 -> 4096 -> 4096 -> 10 = 20,037,642 parameters.
  ImageModelOptions o = opts(1, 28, 10);
  o.hiddenSizes = {4096, 4096};
  ASSERT_EQ(dense(784, 4096) + dense(4096, 4096) + dense(4096, 10), 20037642);
  auto big = makeImageModel("mlp", o);
  EXPECT_EQ(countParameters(*big), 20037642);
  EXPECT_EQ(parameterNames(*big),
            (std::set<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
  o.hiddenSizes = {7};
  auto one = makeImageModel("mlp", o);
  EXPECT_EQ(countParameters(*one), dense(784, 7) + dense(7, 10));
  EXPECT_EQ(one->forward(at::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  o.hiddenSizes = {};
  EXPECT_NE(configErrorOf("mlp", o).find("model.hidden_sizes"), std::string::npos);
  o.hiddenSizes = {64, 0};
  EXPECT_NE(configErrorOf("mlp", o).find("got 0"), std::string::npos);
}

TEST(VisionModels, AlexNetMatchesTorchvision) {
  auto model = makeImageModel("alexnet", opts(3, 224, 1000));
  EXPECT_EQ(countParameters(*model), 61100840);  // torchvision.models.alexnet()
  auto names = parameterNames(*model);
  for (const char* name : {"features.0.weight", "features.3.weight", "features.6.weight", "features.8.weight",
                           "features.10.bias", "classifier.1.weight", "classifier.4.weight", "classifier.6.bias"}) {
    EXPECT_TRUE(names.count(name)) << name;
  }
  EXPECT_EQ(names.size(), 16u);
}

TEST(VisionModels, AlexNetCifarParameterCount) {
  // features: conv 3->64 3x3 (1,792), 64->192 3x3 (110,784), 192->384 3x3 (663,936),
  //           384->256 3x3 (884,992), 256->256 3x3 (590,080)            = 2,251,584
  // classifier: 256*4*4=4096 -> 1024 (4,195,328), 1024 -> 1024 (1,049,600),
  //             1024 -> 10 (10,250)                                     = 5,255,178
  // total 7,506,762.
  int64_t byHand = conv(3, 64, 3) + conv(64, 192, 3) + conv(192, 384, 3) + conv(384, 256, 3) + conv(256, 256, 3) +
                   dense(4096, 1024) + dense(1024, 1024) + dense(1024, 10);
  ASSERT_EQ(byHand, 7506762);
  EXPECT_EQ(countParameters(*makeImageModel("alexnet-cifar", opts(3, 32, 10))), 7506762);
}

TEST(VisionModels, ResNetsMatchTorchvision) {
  auto r18 = makeImageModel("resnet18", opts(3, 224, 1000));
  auto r50 = makeImageModel("resnet50", opts(3, 224, 1000));
  EXPECT_EQ(countParameters(*r18), 11689512);  // torchvision.models.resnet18()
  EXPECT_EQ(countParameters(*r50), 25557032);  // torchvision.models.resnet50()
  // torchvision's state-dict names: 62 / 161 parameter tensors.
  auto names18 = parameterNames(*r18);
  EXPECT_EQ(names18.size(), 62u);
  for (const char* name :
       {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight", "layer1.1.bn2.bias", "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.weight", "layer4.1.conv2.weight", "fc.weight", "fc.bias"}) {
    EXPECT_TRUE(names18.count(name)) << name;
  }
  EXPECT_FALSE(names18.count("layer1.0.downsample.0.weight"));  // layer1 of ResNet-18 keeps its shape
  auto names50 = parameterNames(*r50);
  EXPECT_EQ(names50.size(), 161u);
  EXPECT_TRUE(names50.count("layer1.0.downsample.0.weight"));  // 64 -> 256 channels
  EXPECT_TRUE(names50.count("layer3.5.conv3.weight"));
  // BatchNorm running statistics are buffers, as in PyTorch.
  std::set<std::string> buffers;
  for (const auto& item : r18->named_buffers()) buffers.insert(item.key());
  EXPECT_TRUE(buffers.count("bn1.running_mean"));
  EXPECT_TRUE(buffers.count("layer2.0.downsample.1.running_var"));
}

TEST(VisionModels, ResNetCifarStemChangesOnlyStemAndHead) {
  // The CIFAR stem trades the 7x7 conv (3*64*49 weights, no bias) for a 3x3 one
  // (3*64*9); the max pool has no parameters; the fc has 10 outputs instead of 1000.
  int64_t stemDelta = 3 * 64 * 3 * 3 - 3 * 64 * 7 * 7;
  int64_t r18 = 11689512 + stemDelta - dense(512, 1000) + dense(512, 10);
  int64_t r50 = 25557032 + stemDelta - dense(2048, 1000) + dense(2048, 10);
  EXPECT_EQ(r18, 11173962);
  EXPECT_EQ(countParameters(*makeImageModel("resnet18", opts(3, 32, 10))), r18);
  EXPECT_EQ(countParameters(*makeImageModel("resnet50", opts(3, 32, 10))), r50);
  // 64 is the largest side with the CIFAR stem, 65 the smallest with the ImageNet one.
  EXPECT_EQ(countParameters(*makeImageModel("resnet18", opts(3, 64, 10))), r18);
  EXPECT_EQ(countParameters(*makeImageModel("resnet18", opts(3, 65, 10))), r18 - stemDelta);
  // One input channel: the stem conv has 64*9 weights instead of 3*64*9.
  EXPECT_EQ(countParameters(*makeImageModel("resnet18", opts(1, 28, 10))), r18 - 2 * 64 * 9);
}

TEST(VisionModels, CountParametersSkipsFrozen) {
  auto model = makeImageModel("convnet", opts(1, 28, 10));
  int64_t all = countParameters(*model);
  model->named_parameters()["fc2.weight"].set_requires_grad(false);
  EXPECT_EQ(countParameters(*model), all - 128 * 10);
}

void expectLogits(const std::string& type, const ImageModelOptions& o, int64_t batch) {
  SCOPED_TRACE(type + " at " + std::to_string(o.imageSize));
  at::manual_seed(1);
  auto model = makeImageModel(type, o);
  model->eval();
  c10::NoGradGuard noGrad;
  at::Tensor out = model->forward(at::randn({batch, o.inChannels, o.imageSize, o.imageSize}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{batch, o.numClasses}));
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_TRUE(out.isfinite().all().item<bool>());
}

TEST(VisionModels, OutputShapesSmallModels) {
  expectLogits("convnet", opts(1, 28, 10), 2);
  expectLogits("convnet", opts(3, 32, 10), 2);
  expectLogits("mlp", opts(1, 28, 10), 2);
  expectLogits("alexnet-cifar", opts(3, 32, 10), 2);
  expectLogits("alexnet-cifar", opts(3, 8, 7), 2);
}

TEST(VisionModels, OutputShapesAlexNet) {
  expectLogits("alexnet", opts(3, 224, 1000), 2);
  expectLogits("alexnet", opts(1, 63, 5), 1);  // the smallest side it takes
}

TEST(VisionModels, OutputShapesResNets) {
  expectLogits("resnet18", opts(3, 32, 10), 2);
  expectLogits("resnet18", opts(1, 28, 10), 2);
  expectLogits("resnet18", opts(3, 96, 100), 2);  // ImageNet stem
  expectLogits("resnet50", opts(3, 64, 10), 2);
}

/// The chain of layers() is forward(), and every parameter and buffer belongs to exactly one layer.
void expectLayersComposeTheModel(const std::string& type, const ImageModelOptions& o, size_t count) {
  SCOPED_TRACE(type);
  at::manual_seed(3);
  auto model = makeImageModel(type, o);
  model->eval();  // dropout off, BatchNorm by running statistics: both paths compute the same
  auto layers = model->layers();
  EXPECT_EQ(layers.size(), count);
  std::set<const void*> owned;
  size_t tensors = 0;
  for (const auto& layer : layers) {
    for (const auto& m : layer.modules) {
      for (const auto& p : m->parameters()) EXPECT_TRUE(owned.insert(p.unsafeGetTensorImpl()).second) << layer.name;
      for (const auto& b : m->buffers()) EXPECT_TRUE(owned.insert(b.unsafeGetTensorImpl()).second) << layer.name;
    }
  }
  for (const auto& p : model->parameters()) tensors += owned.count(p.unsafeGetTensorImpl());
  for (const auto& b : model->buffers()) tensors += owned.count(b.unsafeGetTensorImpl());
  EXPECT_EQ(tensors, owned.size());
  EXPECT_EQ(owned.size(), model->parameters().size() + model->buffers().size());
  c10::NoGradGuard noGrad;
  at::Tensor x = at::randn({2, o.inChannels, o.imageSize, o.imageSize});
  at::Tensor y = x;
  for (const auto& layer : layers) y = layer.forward(y);
  EXPECT_TRUE(at::equal(y, model->forward(x)));
  EXPECT_THROW(layers[0].forward(at::randn({2, o.inChannels + 1, o.imageSize, o.imageSize})), Error);
}

TEST(VisionModels, LayersComposeTheModel) {
  expectLayersComposeTheModel("convnet", opts(1, 28, 10), 4);
  auto mlp = opts(1, 28, 10);
  mlp.hiddenSizes = {64, 32, 16};
  expectLayersComposeTheModel("mlp", mlp, 4);
  expectLayersComposeTheModel("alexnet-cifar", opts(3, 32, 10), 8);
  expectLayersComposeTheModel("resnet18", opts(3, 32, 10), 10);
}

TEST(VisionModels, ConvNetBackwardReachesEveryParameter) {
  at::manual_seed(2);
  auto model = makeImageModel("convnet", opts(1, 28, 10));
  at::Tensor images = at::randn({4, 1, 28, 28});
  at::Tensor labels = at::randint(10, {4}, at::kLong);
  at::Tensor loss = at::cross_entropy_loss(model->forward(images), labels);
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(item.value().grad().defined());
    EXPECT_EQ(item.value().grad().sizes(), item.value().sizes());
    EXPECT_GT(item.value().grad().abs().sum().item<double>(), 0.0);
  }
}

/// A convnet built with LOCKSTEP_PLAIN_POOLING=`plain` (the variable is read when the model is built).
std::shared_ptr<ImageClassifierImpl> convNetWithPooling(const char* plain) {
  ::setenv("LOCKSTEP_PLAIN_POOLING", plain, 1);
  struct Unset {
    ~Unset() { ::unsetenv("LOCKSTEP_PLAIN_POOLING"); }
  } unset;
  return makeImageModel("convnet", opts(1, 28, 10));
}

/// The convnet's parameters after 3 SGD steps, built with LOCKSTEP_PLAIN_POOLING=`plain`.
std::vector<at::Tensor> convNetAfterSteps(const char* plain) {
  at::manual_seed(4);
  auto model = convNetWithPooling(plain);
  at::manual_seed(5);
  for (int step = 0; step < 3; ++step) {
    model->zero_grad();
    at::Tensor images = at::randn({16, 1, 28, 28});
    at::cross_entropy_loss(model->forward(images), at::randint(10, {16}, at::kLong)).backward();
    c10::NoGradGuard noGrad;
    for (auto& p : model->parameters()) p.sub_(p.grad() * 0.1);
  }
  std::vector<at::Tensor> params;
  for (auto& p : model->parameters()) params.push_back(p.detach().clone());
  return params;
}

TEST(VisionModels, ConvNetTrainsToTheSameBitsWithLibTorchsPooling) {
  // lockstep::reluMaxPool2x2 (the default) against LibTorch's relu + max_pool2d, through training.
  auto ours = convNetAfterSteps("0");
  auto libtorch = convNetAfterSteps("1");
  ASSERT_EQ(ours.size(), libtorch.size());
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(at::equal(ours[i], libtorch[i])) << "parameter " << i;
  // And the variable does choose: the first layer's output comes from LibTorch's pooling only with 1.
  auto firstLayerOp = [](const char* plain) {
    return convNetWithPooling(plain)->layers().front().forward(at::randn({2, 1, 28, 28})).grad_fn()->name();
  };
  EXPECT_EQ(firstLayerOp("1"), "MaxPool2DWithIndicesBackward0");
  EXPECT_NE(firstLayerOp("0").find("ReluMaxPool2x2"), std::string::npos) << firstLayerOp("0");
  try {
    convNetWithPooling("yes");
    ADD_FAILURE() << "no error for LOCKSTEP_PLAIN_POOLING=yes";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("LOCKSTEP_PLAIN_POOLING"), std::string::npos) << e.what();
  }
}

TEST(VisionModels, ResNetBackwardReachesEveryParameter) {
  at::manual_seed(3);
  auto model = makeImageModel("resnet18", opts(3, 32, 10));
  model->train();
  at::Tensor loss = at::cross_entropy_loss(model->forward(at::randn({2, 3, 32, 32})), at::tensor({1, 7}, at::kLong));
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(item.value().grad().defined());
    EXPECT_TRUE(item.value().grad().isfinite().all().item<bool>());
  }
  // Training mode updated the BatchNorm statistics.
  EXPECT_EQ(model->named_buffers()["bn1.num_batches_tracked"].item<int64_t>(), 1);
}

TEST(VisionModels, ResNetInitialisation) {
  at::manual_seed(4);
  auto model = makeImageModel("resnet18", opts(3, 32, 10));
  auto params = model->named_parameters();
  // kaiming normal, fan_out, ReLU gain: std = sqrt(2 / (out_channels * k * k)).
  at::Tensor w = params["layer1.0.conv1.weight"];  // 64x64x3x3, 36,864 draws
  double expected = std::sqrt(2.0 / (64 * 3 * 3));
  EXPECT_NEAR(w.std().item<double>(), expected, 0.03 * expected);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.03 * expected);
  at::Tensor down = params["layer3.0.downsample.0.weight"];  // 256x128x1x1
  double expectedDown = std::sqrt(2.0 / 256);
  EXPECT_NEAR(down.std().item<double>(), expectedDown, 0.05 * expectedDown);
  for (const auto& item : params) {
    if (item.key().find("bn") == std::string::npos && item.key().find("downsample.1") == std::string::npos) continue;
    SCOPED_TRACE(item.key());
    double want = item.key().size() >= 6 && item.key().substr(item.key().size() - 6) == "weight" ? 1.0 : 0.0;
    EXPECT_TRUE(item.value().eq(want).all().item<bool>());
  }
}

TEST(VisionModels, DropoutFollowsTrainAndEval) {
  at::manual_seed(5);
  auto model = makeImageModel("alexnet-cifar", opts(3, 32, 10));
  at::Tensor images = at::randn({2, 3, 32, 32});
  c10::NoGradGuard noGrad;
  model->eval();
  EXPECT_TRUE(model->forward(images).equal(model->forward(images)));
  model->train();
  EXPECT_FALSE(model->forward(images).equal(model->forward(images)));
}

TEST(VisionModels, UnknownTypeIsConfigError) {
  std::string message = configErrorOf("resnet34", opts(3, 32, 10));
  ASSERT_FALSE(message.empty());
  EXPECT_NE(message.find("resnet34"), std::string::npos) << message;
  for (const auto& type : imageModelTypes()) EXPECT_NE(message.find(type), std::string::npos) << message;
}

TEST(VisionModels, TooSmallImagesAreConfigErrors) {
  std::string message = configErrorOf("alexnet", opts(3, 32, 10));
  ASSERT_FALSE(message.empty());
  EXPECT_NE(message.find("alexnet"), std::string::npos) << message;
  EXPECT_NE(message.find("63x63"), std::string::npos) << message;
  EXPECT_NE(message.find("32x32"), std::string::npos) << message;
  EXPECT_NE(message.find("alexnet-cifar"), std::string::npos) << message;
  EXPECT_FALSE(configErrorOf("alexnet", opts(3, 62, 10)).empty());
  EXPECT_FALSE(configErrorOf("alexnet-cifar", opts(3, 7, 10)).empty());
  EXPECT_FALSE(configErrorOf("convnet", opts(1, 3, 10)).empty());
  EXPECT_FALSE(configErrorOf("resnet18", opts(3, 0, 10)).empty());
  EXPECT_FALSE(configErrorOf("mlp", opts(0, 28, 10)).empty());
  EXPECT_FALSE(configErrorOf("mlp", opts(1, 28, 0)).empty());
}

TEST(VisionModels, ForwardChecksTheInput) {
  auto model = makeImageModel("convnet", opts(1, 28, 10));
  EXPECT_THROW(model->forward(at::randn({2, 1, 32, 32})), Error);  // built for 28x28
  EXPECT_THROW(model->forward(at::randn({2, 3, 28, 28})), Error);  // built for 1 channel
  EXPECT_THROW(model->forward(at::randn({1, 28, 28})), Error);     // no batch dimension
  auto resnet = makeImageModel("resnet18", opts(3, 32, 10));
  EXPECT_THROW(resnet->forward(at::randn({1, 1, 32, 32})), Error);
}

}  // namespace
}  // namespace lockstep
