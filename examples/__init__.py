"""The examples that come with dlprim, installed as dlprim.examples (`dlprim-train --example NAME`)."""
