"""Which torchvision stages device-transforms can split, in each mode: read by the knob's plan
(device_transforms.py, in the parent) and by its torch side (_device_images.py, in the child)."""

# Transforms kept as they are on the host in "normalize" mode: torchvision's PIL-in/PIL-out
# stages, whose output goes on into the uint8 conversion.
HOST_STAGES = frozenset(
    {"Resize", "CenterCrop", "RandomCrop", "RandomResizedCrop", "RandomHorizontalFlip",
     "RandomVerticalFlip", "ColorJitter", "RandomRotation", "RandomAffine", "Pad",
     "Grayscale", "RandomGrayscale", "RandAugment", "AutoAugment", "TrivialAugmentWide",
     "AugMix", "RandomPerspective", "GaussianBlur", "RandomEqualize", "RandomAutocontrast",
     "RandomPosterize", "RandomSolarize", "RandomAdjustSharpness", "RandomInvert"}
)  # fmt: skip
# Stages "full" mode runs on the batch, on the device.
DEVICE_STAGES = frozenset({"Resize", "CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip"})
TAIL = ("ToTensor", "Normalize")
MODES = ("normalize", "full")
