"""The models of the course, one file each.

    mlp.py          MLP: the foundation lessons' model
    unet.py         UNet: high-resolution segmentation, blocks that can each be checkpointed
    transformer.py  TransformerLM: a tiny GPT-style character language model
    recommender.py  Recommender: embedding bags and an MLP, with sparse row gradients
"""
from .mlp import MLP
from .recommender import Recommender
from .transformer import TransformerBlock, TransformerLM
from .unet import UNet, dice_score, segmentation_loss

__all__ = ["MLP", "UNet", "dice_score", "segmentation_loss", "TransformerBlock", "TransformerLM", "Recommender"]
