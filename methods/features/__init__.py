"""Cached CNN features: ResNet grid maps (conv3/4/5), pooled vectors and RoIAlign region features."""
