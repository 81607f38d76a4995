"""Image backbones: ResNet-20 for 32×32 inputs, torchvision ResNet / DenseNet with the head replaced, and a CLIP
classifier from transformers.

Nothing here downloads: torchvision models are built with ``weights=None`` and CLIP from a local folder or a
configuration. Pre-trained weights come from a local file or folder (``weights_path`` / ``pretrained_path``).

Every model maps images ``[B, 3, H, W]`` (float, normalized) to scores: ``[B]`` when it has one output (the
binary objectives' scorer), ``[B, K]`` otherwise. The number of outputs may be left to the data
(``num_outputs=None``): the algorithm module calls :meth:`bind_sizes` with the DataModule's ``sizes``, whose
``num_outputs`` is 1 for binary tasks, C for C classes and T for T tasks; an explicit value that disagrees with
the data is an error naming both numbers.

Where each model is used: ResNet-20 (CIFAR-10-LT in Yao, Lin & Yang, NeurIPS 2022, §6.1; the LibAUC CIFAR
recipes), ResNet-18 (imbalanced binary CIFAR in Wang et al., AISTATS 2022, §4.2), DenseNet-121 (CheXpert in Yao, Lin
& Yang, §6.1, from scratch), CLIP (BDD100K continual learning in Chen et al., NeurIPS 2025, App. F.3).

References:
    * Yao, Lin & Yang (NeurIPS 2022): Yao Yao, Qihang Lin and Tianbao Yang, "Large-scale Optimization of Partial
      AUC in a Range of False Positive Rates", NeurIPS 2022, arXiv:2203.01505.
    * Wang et al. (AISTATS 2022): Guanghui Wang, Ming Yang, Lijun Zhang and Tianbao Yang, "Momentum Accelerates
      the Convergence of Stochastic AUPRC Maximization", AISTATS 2022, arXiv:2107.01173.
    * Chen et al. (NeurIPS 2025): Xingyu Chen, Bokun Wang, Ming Yang, Qihang Lin and Tianbao Yang, "Stochastic
      Momentum Methods for Non-smooth Non-Convex Finite-Sum Coupled Compositional Optimization", NeurIPS 2025,
      arXiv:2506.02504.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from fccolit.checkpoints import newest_last_checkpoint

__all__ = ["ResNet20", "TorchvisionBackbone", "CLIPClassifier", "load_backbone_state", "write_tiny_clip"]


def _scores(out: torch.Tensor, num_outputs: int | None) -> torch.Tensor:
    return out.squeeze(-1) if num_outputs == 1 else out


class _OutputSized(nn.Module):
    """A model whose head width may come from the data's ``sizes["num_outputs"]``."""

    num_outputs: int | None

    def build_head(self, num_outputs: int) -> None:
        raise NotImplementedError

    def bind_sizes(self, sizes: dict[str, int]) -> None:
        if "num_outputs" not in sizes:
            return
        k = int(sizes["num_outputs"])
        if self.num_outputs is None:
            self.num_outputs = k
            self.build_head(k)
        elif int(self.num_outputs) != k:
            raise ValueError(
                f"{type(self).__name__} was configured with num_outputs={self.num_outputs} but the data has "
                f"num_outputs={k} (1 for a binary task, the number of classes or tasks otherwise): set num_outputs to "
                f"{k}, or to null to take it from the data."
            )

    def _check_head(self) -> None:
        if self.num_outputs is None:
            raise RuntimeError(
                f"{type(self).__name__} has no head yet: pass num_outputs, or build it through an fccolit module with "
                "the DataModule's sizes."
            )


# ---------------------------------------------------------------------------------------------- ResNet-20
class _BasicBlock(nn.Module):
    """3×3 conv → BN → ReLU → 3×3 conv → BN, plus the shortcut; ReLU after the sum.

    Shortcut "option A" of He et al. (2016), §4.2: identity, subsampled by 2 and zero-padded in channels where the
    shape changes (no parameters), as in the paper's CIFAR ResNets (0.27M parameters for ResNet-20).
    """

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.pad = stride, planes - in_planes

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1 and self.pad == 0:
            return x
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad // 2, self.pad - self.pad // 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet20(_OutputSized):
    """ResNet-20 image scorer ``[B, 3, 32, 32] -> [B]`` or ``[B, num_outputs]`` (He et al. 2016).

    He et al.'s §4.2: a 3×3 conv with 16 channels, three stages of three basic blocks with 16, 32 and 64 channels
    (stride 2 at the start of stages 2 and 3), global average pooling and a linear head. Kaiming-normal
    initialization of the convolutions and the head.

    Input ``[B, 3, 32, 32]`` (other sizes work: the pooling is global); output ``[B]`` for one output, else
    ``[B, num_outputs]``.

    Args:
        num_outputs: width of the head (None: ``sizes["num_outputs"]`` of the data).
        depth: 6n + 2 (20, 32, 44, 56, 110 are the paper's; 20 is the default).
        in_channels: input channels.
        weights_path: a local state dict of this model (e.g. a cross-entropy pre-trained one), or a folder of runs (the
            newest last.ckpt below it, e.g. ``lightning_logs/cifar_ce_pretrain``), see
            :func:`load_backbone_state`.
        load_head: also load the head from ``weights_path``; default re-initializes it.

    Raises:
        ValueError: ``depth`` not 6n + 2 with n >= 1; ``load_head=True`` without ``num_outputs``; weights that do
            not fit the model (missing tensors, other shapes) or a file that holds no state dict;
            :meth:`bind_sizes` with a ``num_outputs`` other than an explicit one.
        FileNotFoundError: no file at ``weights_path`` (or a folder without ``last.ckpt``).
        RuntimeError: ``forward`` before the head exists (``num_outputs=None`` and no sizes bound yet).

    Example:
        >>> import torch
        >>> from fccolit.models import ResNet20
        >>> ResNet20(num_outputs=1, depth=8)(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2])
        >>> model = ResNet20(num_outputs=None, depth=8)
        >>> model.bind_sizes({"num_outputs": 10})
        >>> model(torch.randn(2, 3, 32, 32)).shape
        torch.Size([2, 10])
    """

    def __init__(
        self,
        num_outputs: int | None = 1,
        depth: int = 20,
        in_channels: int = 3,
        weights_path: str | None = None,
        load_head: bool = False,
    ) -> None:
        super().__init__()
        if (depth - 2) % 6 or depth < 8:
            raise ValueError(f"ResNet depth must be 6n + 2 with n >= 1 (20, 32, 44, 56, 110), got {depth}")
        blocks = (depth - 2) // 6
        self.num_outputs, self.depth = num_outputs, depth
        self.conv1 = nn.Conv2d(in_channels, 16, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        layers, width = [], 16
        for planes, stride in ((16, 1), (32, 2), (64, 2)):
            for b in range(blocks):
                layers.append(_BasicBlock(width, planes, stride if b == 0 else 1))
                width = planes
        self.layers = nn.Sequential(*layers)
        self.feature_dim = width
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
        if num_outputs is not None:
            self.build_head(int(num_outputs))
        if weights_path is not None:
            if num_outputs is None and load_head:
                raise ValueError("load_head=True needs an explicit num_outputs (the head is built before loading)")
            load_backbone_state(self, weights_path, head_prefix="fc.", load_head=load_head)

    def build_head(self, num_outputs: int) -> None:
        self.fc = nn.Linear(self.feature_dim, num_outputs)
        nn.init.kaiming_normal_(self.fc.weight)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, 64]`` pooled features."""
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return F.adaptive_avg_pool2d(out, 1).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_head()
        return _scores(self.fc(self.features(x)), self.num_outputs)


# ---------------------------------------------------------------------------------------------- weights files
_PREFIXES = ("", "net.", "model.net.", "model.", "module.", "module.net.", "backbone.", "model.backbone.")
_DENSENET_OLD_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$")


def _read_state_dict(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The state dict in the file ``path``; a folder stands for the newest ``last.ckpt`` below it, so a config's log
    folder (``lightning_logs/cifar_ce_pretrain``) names its newest run's last checkpoint."""
    path = Path(path)
    if path.is_dir():
        newest = newest_last_checkpoint(path)
        if newest is None:
            raise FileNotFoundError(f"weights folder {path} holds no last.ckpt (train the run first, or give a file)")
        path = newest
    if not path.is_file():
        raise FileNotFoundError(f"weights file not found: {path}")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure: name the file
        raise ValueError(f"{path}: cannot read a state dict from this file ({type(err).__name__}: {err})") from err
    for key in ("state_dict", "model_state_dict", "model"):  # Lightning checkpoints and common wrappers
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ValueError(f"{path}: expected a state dict (a mapping of names to tensors), got {type(obj).__name__}")
    return obj


def load_backbone_state(
    module: nn.Module, path: str | os.PathLike, head_prefix: str, load_head: bool = False
) -> tuple[list[str], list[str]]:
    """Load a local state dict into ``module``, the head excepted unless ``load_head``.

    Accepts a plain ``state_dict`` of the module, one saved from a wrapper (keys prefixed ``net.``, ``model.``,
    ``module.``, ...), a Lightning checkpoint (its ``state_dict``) and torchvision's released DenseNet files
    (old ``norm.1`` key names, no ``num_batches_tracked``). Every other non-head parameter and buffer of ``module``
    must be in the file.

    Returns:
        ``(loaded, skipped)`` key lists (``skipped``: keys of the file that were not used, e.g. the old head).
    """
    raw = _read_state_dict(path)
    target = module.state_dict()
    best: dict[str, torch.Tensor] = {}
    for prefix in _PREFIXES:
        candidate = {}
        for key, value in raw.items():
            if not key.startswith(prefix):
                continue
            name = key[len(prefix) :]
            old = _DENSENET_OLD_KEY.match(name)
            if old:
                name = old.group(1) + old.group(2)
            candidate[name] = value
        if len(set(candidate) & set(target)) > len(set(best) & set(target)):
            best = candidate
    is_head = lambda k: k == head_prefix.rstrip(".") or k.startswith(head_prefix)  # noqa: E731
    # BatchNorm's num_batches_tracked postdates the released torchvision files (torch < 0.4.1): optional
    wanted = [k for k in target if (load_head or not is_head(k)) and (k in best or not k.endswith("num_batches_tracked"))]
    missing = [k for k in wanted if k not in best]
    if missing:
        raise ValueError(
            f"{path}: the weights do not fit {type(module).__name__}: {len(missing)} of its tensors are missing from "
            f"the file (e.g. {missing[:5]}); the file has {len(raw)} tensors (e.g. {list(raw)[:5]})"
        )
    wrong = [(k, tuple(best[k].shape), tuple(target[k].shape)) for k in wanted if best[k].shape != target[k].shape]
    if wrong:
        hint = " (the head differs: keep load_head=False to re-initialize it)" if any(is_head(k) for k, _, _ in wrong) else ""
        raise ValueError(f"{path}: tensor shapes do not match{hint}: {wrong[:5]} (name, file, model)")
    module.load_state_dict({k: best[k] for k in wanted}, strict=False)
    return wanted, [k for k in raw if k not in set(wanted)]


# ---------------------------------------------------------------------------------------------- torchvision
_TORCHVISION = {
    "resnet18": "fc",
    "resnet34": "fc",
    "resnet50": "fc",
    "densenet121": "classifier",
}


class TorchvisionBackbone(_OutputSized):
    """A torchvision ResNet or DenseNet scorer ``[B, 3, H, W] -> [B]`` or ``[B, num_outputs]``, with a fresh head.

    Built without weights, its head replaced by a fresh linear layer. Built with ``weights=None``; the new head is ``Linear(feature_dim, num_outputs)``.

    Pre-trained weights come only from a local file (``weights_path``): e.g. ImageNet weights saved once with
    ``torch.save(torchvision.models.resnet18(weights="DEFAULT").state_dict(), path)`` on a machine with network,
    or a cross-entropy pre-trained checkpoint of this module (Wang et al.'s recipe: CE pre-training, then the last
    layer re-initialized and trained with the AP method: ``load_head=False``, the default).

    Output ``[B]`` for one output, else ``[B, num_outputs]``.

    Args:
        name: ``"resnet18"``, ``"resnet34"``, ``"resnet50"`` or ``"densenet121"``.
        num_outputs: width of the new head (None: ``sizes["num_outputs"]`` of the data).
        weights_path: local state dict (see :func:`load_backbone_state` for the accepted layouts).
        load_head: also load the head from ``weights_path`` (its shape must match); default re-initializes it.
        cifar_stem: for 32×32 inputs, replace the 7×7 stride-2 stem and its max-pool by a 3×3 stride-1 conv (the
            usual CIFAR adaptation; off by default, where a paper does not say).
        memory_efficient: DenseNet's checkpointed concatenation (less memory, slower).

    Raises:
        ValueError: an unknown ``name``; ``load_head=True`` without ``num_outputs``; weights that do not fit the
            network (missing tensors, other shapes) or a file that holds no state dict; :meth:`bind_sizes` with a
            ``num_outputs`` other than an explicit one.
        FileNotFoundError: no file at ``weights_path`` (or a folder without ``last.ckpt``).
        RuntimeError: ``forward`` before the head exists (``num_outputs=None`` and no sizes bound yet).

    Example:
        >>> import torch
        >>> from fccolit.models import TorchvisionBackbone
        >>> model = TorchvisionBackbone("resnet18", num_outputs=3, cifar_stem=True).eval()
        >>> model.head
        Linear(in_features=512, out_features=3, bias=True)
        >>> model(torch.randn(1, 3, 8, 8)).shape
        torch.Size([1, 3])
    """

    def __init__(
        self,
        name: str = "resnet18",
        num_outputs: int | None = 1,
        weights_path: str | None = None,
        load_head: bool = False,
        cifar_stem: bool = False,
        memory_efficient: bool = False,
    ) -> None:
        super().__init__()
        import torchvision.models as tvm

        if name not in _TORCHVISION:
            raise ValueError(f"TorchvisionBackbone: unknown name {name!r}; choose one of {sorted(_TORCHVISION)}")
        self.name, self.num_outputs, self.cifar_stem = name, num_outputs, cifar_stem
        self.head_name = _TORCHVISION[name]
        kwargs = {"memory_efficient": memory_efficient} if name.startswith("densenet") else {}
        self.net = getattr(tvm, name)(weights=None, **kwargs)
        if cifar_stem:
            if name.startswith("resnet"):
                self.net.conv1 = nn.Conv2d(3, 64, 3, stride=1, padding=1, bias=False)
                self.net.maxpool = nn.Identity()
                nn.init.kaiming_normal_(self.net.conv1.weight, mode="fan_out", nonlinearity="relu")
            else:
                width = self.net.features.conv0.out_channels
                self.net.features.conv0 = nn.Conv2d(3, width, 3, stride=1, padding=1, bias=False)
                self.net.features.pool0 = nn.Identity()
                nn.init.kaiming_normal_(self.net.features.conv0.weight)
        self.feature_dim = getattr(self.net, self.head_name).in_features
        if num_outputs is not None:
            self.build_head(int(num_outputs))
        else:
            setattr(self.net, self.head_name, nn.Identity())
        if weights_path is not None:
            if num_outputs is None and load_head:
                raise ValueError("load_head=True needs an explicit num_outputs (the head is built before loading)")
            load_backbone_state(self.net, weights_path, head_prefix=f"{self.head_name}.", load_head=load_head)

    def build_head(self, num_outputs: int) -> None:
        head = nn.Linear(self.feature_dim, num_outputs)
        if self.name.startswith("densenet"):
            nn.init.constant_(head.bias, 0.0)  # torchvision's DenseNet init of its classifier
        setattr(self.net, self.head_name, head)

    @property
    def head(self) -> nn.Module:
        return getattr(self.net, self.head_name)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_head()
        return _scores(self.net(x), self.num_outputs)


# ---------------------------------------------------------------------------------------------- CLIP
def require_transformers() -> None:
    """Raise a one-line ``ImportError`` saying how to install transformers, which only the CLIP models need (it is
    the ``clip`` extra, not a dependency of fccolit itself)."""
    if importlib.util.find_spec("transformers") is None:
        raise ImportError("the CLIP models need transformers, which is not installed: pip install 'fccolit[clip]'")


class CLIPClassifier(_OutputSized):
    """A CLIP image/text model (transformers' ``CLIPModel``) as an image classifier ``[B, 3, S, S] -> [B, C]``.

    Two heads:

    * ``"zero_shot"`` (default): one text prompt per class (e.g. ``"the weather is foggy."``, DevSafety's BDD100K
      templates); the logits are ``exp(logit_scale) · cos(E_I(x), E_T(prompt_c))``, ``[B, C]``, with both towers
      trainable (Chen et al. fine-tune CLIP). With ``target`` set, the output is the binary logit of that class,
      ``log p_target − log(1 − p_target)`` of the softmax over the prompts, ``[B]`` (sigmoid of it is p_target).
    * ``"linear"``: a linear head on the projected image embedding, ``[B]`` or ``[B, num_outputs]``.

    :meth:`image_embeddings` / :meth:`text_embeddings` give the normalized embeddings (for contrastive objectives).

    Weights: ``pretrained_path`` is a local folder saved by ``CLIPModel.save_pretrained`` (its tokenizer too, for
    prompts), loaded with ``local_files_only=True``; or ``config`` (keyword arguments of ``CLIPConfig``: e.g.
    ``{"text_config": {...}, "vision_config": {...}, "projection_dim": 32}``) builds a randomly initialized model.
    Nothing is downloaded.

    Inputs: ``[B, 3, S, S]`` with ``S = vision_config.image_size`` (224 for the released models), normalized with
    CLIP's mean / std (the BDD100K DataModule's default).

    Args:
        pretrained_path: local folder of a CLIP model (and tokenizer).
        config: ``CLIPConfig`` keyword arguments (when no ``pretrained_path``).
        prompts: the class prompts (zero-shot head).
        tokenizer_path: local folder of a CLIP tokenizer (default: ``pretrained_path``).
        head: ``"zero_shot"`` or ``"linear"``.
        target: zero-shot head: index of the prompt whose binary logit is the output (None: all logits).
        num_outputs: linear head width (None: from the data); for the zero-shot head it is derived (C, or 1 with
            ``target``) and only checked against the data.
        logit_scale: a fixed multiplier of the cosine similarities in place of CLIP's learned
            ``exp(logit_scale)`` (which is then frozen): e.g. 1.0 outputs the cosines themselves, for objectives
            that apply their own temperature (Chen et al.'s continual learning, τ = 0.05). None: the learned one.

    Raises:
        ImportError: transformers is not installed (the ``clip`` extra).
        ValueError: an unknown ``head``; neither ``pretrained_path`` nor ``config``; ``logit_scale`` <= 0; the
            zero-shot head without ``prompts`` or without a tokenizer folder, with a ``target`` that is not a
            prompt index (or fewer than two prompts), with a ``num_outputs`` other than its own, or with a tokenizer
            that does not fit the text model; :meth:`bind_sizes` with another ``num_outputs``.
        FileNotFoundError: ``pretrained_path`` or ``tokenizer_path`` is not a folder (nothing is downloaded).
        RuntimeError: ``forward`` of the linear head before it exists (``num_outputs=None``, no sizes bound).

    Example:
        A tiny random CLIP (:func:`write_tiny_clip`: two layers of width 32 per tower), 32×32 images:

        >>> import tempfile
        >>> import torch
        >>> from fccolit.models import CLIPClassifier
        >>> from fccolit.models.vision import write_tiny_clip
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     _ = write_tiny_clip(folder, image_size=32, patch_size=16)
        ...     model = CLIPClassifier(pretrained_path=folder, prompts=["foggy.", "clear.", "rainy."])
        ...     binary = CLIPClassifier(pretrained_path=folder, prompts=["foggy.", "clear."], target=0)
        ...     linear = CLIPClassifier(pretrained_path=folder, head="linear", num_outputs=4)
        >>> x = torch.randn(2, 3, 32, 32)
        >>> model(x).shape, binary(x).shape, linear(x).shape
        (torch.Size([2, 3]), torch.Size([2]), torch.Size([2, 4]))
    """

    def __init__(
        self,
        pretrained_path: str | None = None,
        config: dict[str, Any] | None = None,
        prompts: Sequence[str] | None = None,
        tokenizer_path: str | None = None,
        head: str = "zero_shot",
        target: int | None = None,
        num_outputs: int | None = None,
        logit_scale: float | None = None,
    ) -> None:
        super().__init__()
        require_transformers()
        from transformers import CLIPConfig, CLIPModel

        if head not in ("zero_shot", "linear"):
            raise ValueError(f"CLIPClassifier: head must be 'zero_shot' or 'linear', got {head!r}")
        if pretrained_path is not None:
            if not Path(pretrained_path).is_dir():
                raise FileNotFoundError(
                    f"CLIP folder not found: {pretrained_path} (a folder written by CLIPModel.save_pretrained; "
                    "fccolit never downloads weights)"
                )
            self.clip = CLIPModel.from_pretrained(pretrained_path, local_files_only=True)
        elif config is not None:
            self.clip = CLIPModel(CLIPConfig(**dict(config)))
        else:
            raise ValueError("CLIPClassifier needs pretrained_path (a local folder) or config (a random model); weights are never downloaded")
        self.head_type, self.target = head, target
        self.embed_dim = int(self.clip.config.projection_dim)
        self.fixed_logit_scale = None if logit_scale is None else float(logit_scale)
        if self.fixed_logit_scale is not None:
            if not self.fixed_logit_scale > 0.0:
                raise ValueError(f"CLIPClassifier: logit_scale must be > 0 (or None for the learned one), got {logit_scale}")
            self.clip.logit_scale.requires_grad_(False)  # unused: no gradient (DDP would flag it otherwise)
        if head == "zero_shot":
            if not prompts:
                raise ValueError("CLIPClassifier(head='zero_shot') needs one text prompt per class (prompts=[...])")
            self.prompts = list(prompts)
            if target is not None and not 0 <= int(target) < len(self.prompts):
                raise ValueError(f"target={target} is not a prompt index (0..{len(self.prompts) - 1})")
            if target is not None and len(self.prompts) < 2:
                raise ValueError("a binary zero-shot output (target) needs at least two prompts")
            ids, mask = self._tokenize(self.prompts, tokenizer_path or pretrained_path)
            self.register_buffer("prompt_ids", ids, persistent=False)
            self.register_buffer("prompt_mask", mask, persistent=False)
            derived = 1 if target is not None else len(self.prompts)
            if num_outputs is not None and int(num_outputs) != derived:
                raise ValueError(f"CLIPClassifier: the zero-shot head has {derived} outputs, num_outputs={num_outputs} was given")
            self.num_outputs = derived
        else:
            self.prompts = []
            self.num_outputs = num_outputs
            if num_outputs is not None:
                self.build_head(int(num_outputs))

    def _tokenize(self, prompts: list[str], tokenizer_path: str | None) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers import CLIPTokenizer

        if tokenizer_path is None:
            raise ValueError("CLIPClassifier: prompts need a tokenizer: pass tokenizer_path (a local folder) or pretrained_path")
        if not Path(tokenizer_path).is_dir():
            raise FileNotFoundError(f"CLIP tokenizer folder not found: {tokenizer_path}")
        tokenizer = CLIPTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
        text_config = self.clip.config.text_config
        eos = getattr(text_config, "eos_token_id", None)
        if eos not in (None, 2) and tokenizer.eos_token_id != eos:  # 2: the legacy configs pool at argmax(ids)
            raise ValueError(
                f"the tokenizer in {tokenizer_path} ends prompts with token {tokenizer.eos_token_id} but the text model "
                f"pools at eos_token_id={eos}: they do not belong together"
            )
        out = tokenizer(
            prompts, padding=True, truncation=True, max_length=text_config.max_position_embeddings, return_tensors="pt"
        )
        if int(out["input_ids"].max()) >= text_config.vocab_size:
            raise ValueError(f"the tokenizer's ids exceed the text model's vocab_size ({text_config.vocab_size})")
        return out["input_ids"], out["attention_mask"]

    def build_head(self, num_outputs: int) -> None:
        if self.head_type != "linear":
            raise ValueError(f"the zero-shot head has {self.num_outputs} outputs, the data asks for {num_outputs}")
        self.fc = nn.Linear(self.embed_dim, num_outputs)

    def image_embeddings(self, x: torch.Tensor, normalize: bool = True) -> torch.Tensor:
        """``[B, projection_dim]`` image embeddings (L2-normalized by default)."""
        out = self.clip.visual_projection(self.clip.vision_model(pixel_values=x).pooler_output)
        return F.normalize(out, dim=-1) if normalize else out

    def text_embeddings(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, normalize: bool = True) -> torch.Tensor:
        """``[C, projection_dim]`` text embeddings (L2-normalized by default)."""
        out = self.clip.text_projection(self.clip.text_model(input_ids=input_ids, attention_mask=attention_mask).pooler_output)
        return F.normalize(out, dim=-1) if normalize else out

    def class_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Zero-shot logits ``[B, C]``."""
        text = self.text_embeddings(self.prompt_ids, self.prompt_mask)
        scale = self.clip.logit_scale.exp() if self.fixed_logit_scale is None else self.fixed_logit_scale
        return scale * self.image_embeddings(x) @ text.t()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.head_type == "linear":
            self._check_head()
            return _scores(self.fc(self.image_embeddings(x, normalize=False)), self.num_outputs)
        logits = self.class_logits(x)
        if self.target is None:
            return logits
        others = torch.cat([logits[:, : self.target], logits[:, self.target + 1 :]], dim=1)
        return logits[:, self.target] - torch.logsumexp(others, dim=1)


def write_tiny_clip(folder: str | os.PathLike, image_size: int = 224, patch_size: int = 32, seed: int = 0) -> Path:
    """Write a tiny randomly initialized CLIP model and a character-level tokenizer into ``folder`` with
    ``save_pretrained``: a stand-in for a released CLIP folder (``CLIPClassifier(pretrained_path=folder)``) in tests
    and config smoke tests. Two layers of width 32 in each tower, projection 16; nothing is downloaded.

    The tokenizer knows lower-case letters, digits and ``.,/-`` (every BDD100K prompt). ``image_size`` must equal
    the data's crop size (224 for the BDD100K configs).

    Returns:
        ``folder``.
    """
    import string

    require_transformers()
    from transformers import CLIPConfig, CLIPModel, CLIPTokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    chars = sorted(set(string.ascii_lowercase + string.digits + ".,/-"))
    vocab = {c: i for i, c in enumerate(chars)}
    vocab.update({c + "</w>": len(chars) + i for i, c in enumerate(chars)})
    vocab.update({"<|startoftext|>": len(vocab), "<|endoftext|>": len(vocab) + 1})
    tokenizer = CLIPTokenizer(vocab=vocab, merges=[])
    config = CLIPConfig(
        text_config={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 40, "eos_token_id": tokenizer.eos_token_id,
                     "bos_token_id": tokenizer.bos_token_id, "pad_token_id": tokenizer.pad_token_id},
        vision_config={"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                       "image_size": int(image_size), "patch_size": int(patch_size)},
        projection_dim=16,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        CLIPModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
