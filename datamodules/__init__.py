"""DataModules (installed as ``fccolit.datamodules``)."""

from fccolit.datamodules.base import FCCODataModule
from fccolit.datamodules.libsvm import LibSVMDataModule
from fccolit.datamodules.synthetic import SyntheticBinaryDataModule

__all__ = ["FCCODataModule", "LibSVMDataModule", "SyntheticBinaryDataModule"]
