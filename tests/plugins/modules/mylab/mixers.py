from torch import nn

from mecheval.models.mixers import Mixer
from mecheval.models.shortconv import make_conv
from mecheval.models.sites import Site
from mylab.parts.core import Core


class GatedCumMean(Mixer):
    """y = W_o Core(conv(x)): a gated running mean after the block's short conv (d_conv 2 by default)."""

    default_conv = 2

    def __init__(self, d_model, conv, options, layer_idx, max_len):
        super().__init__(d_model, conv, options, layer_idx, max_len)
        self.conv = make_conv(conv, d_model, max_len)
        if self.conv is not None:
            self.conv_out = Site()
        self.core = Core(d_model)
        self.core_out = Site()
        self.out = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        if self.conv is not None:
            x = self.conv_out(self.conv(x))
        return self.out(self.core_out(self.core(x)))
