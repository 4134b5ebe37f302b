"""Converters of the ONNX training operators: SoftmaxCrossEntropyLoss and
NegativeLogLikelihoodLoss, onto dlprim's loss layers."""
