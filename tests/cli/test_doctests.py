"""The docstring examples of the public classes run and print what they say (issue 17 item 6).

Each module's examples run with :func:`doctest.testmod`; a module whose examples were all deleted fails too, so the
examples of ``IndexedState``, ``SOX``, ``NDCG`` and ``Momentum`` cannot silently disappear.
"""

import doctest
import importlib

import pytest

#: module -> the classes whose docstring must hold a runnable example
DOCTESTED = {
    "fccolit.state": ["IndexedState", "StateUpdate"],
    "fccolit.algorithms.sox": ["SOXFamily", "SOX", "BSGD", "SOAP", "MOAP", "ProjectedSOX", "MOAPV1", "MOAPV2", "ADAP"],
    "fccolit.algorithms.song": ["RankingEvaluation", "RankingSOX", "SONG", "KSONG", "SOLC"],
    "fccolit.algorithms.ranking": ["MiniBatchRanking"],
    "fccolit.algorithms.sonex": ["theoretical_correction_weight", "NonsmoothFCCOModule", "SONEX", "SONX", "PenaltySOX"],
    "fccolit.algorithms.alexr2": ["ALEXR2"],
    "fccolit.algorithms.supervised": ["Supervised"],
    "fccolit.algorithms.base": ["FCCOModule", "TrackedSum"],
    "fccolit.algorithms.double_loop": ["ParameterSnapshot", "proximal_step_", "ProximalStep", "LoopPosition",
                                       "DoubleLoop"],
    "fccolit.algorithms.pauc.agd_sbcd": ["PAUCRange", "SoRR"],
    "fccolit.algorithms.pauc.base": ["RankedRangeModule", "SBCDLoop"],
    "fccolit.algorithms.pauc.dca": ["DCA", "ProximalDCA"],
    "fccolit.algorithms.pauc.minibatch": ["MiniBatchPAUC", "PairwiseAUC"],
    "fccolit.algorithms.pauc.thresholds": ["ThresholdTracker"],
    "fccolit.metrics.ranking": ["NDCGScore", "FullRankingNDCGScore"],
    "fccolit.metrics.classification": ["APScore", "AUROCScore", "PartialAUCScore"],
    "fccolit.metrics.accuracy": ["AccuracyScore"],
    "fccolit.metrics": ["build_metric", "metric_kind"],
    "fccolit.metrics.functional.classification": ["ap_score", "auroc_score", "partial_auc_score",
                                                  "partial_auc_sorted_negatives", "ROCVertices"],
    "fccolit.metrics.functional.ranking": ["ndcg_at_k", "full_ranking_ndcg"],
    "fccolit.metrics.figures": ["figure_writer", "thin", "render", "log_curve_figures", "log_constraint_figure"],
    "fccolit.optim": ["Momentum", "AdaptiveMomentum", "LazyAdam"],
    "fccolit._checks": ["check_weight", "check_choice"],
    "fccolit.objectives.base": ["FCCOObjective", "InnerBatch"],
    "fccolit.objectives.ap": ["AveragePrecisionSurrogate"],
    "fccolit.objectives.nca": ["NCALoss"],
    "fccolit.objectives.pnorm_push": ["PNormPushLoss"],
    "fccolit.objectives.listwise": ["ListwiseCELoss", "SOLCListwiseCELoss"],
    "fccolit.objectives.ranking_losses": ["ListwiseRankingLoss", "LambdaRankLoss", "ApproxNDCGLoss", "NeuralNDCGLoss",
                                          "neural_sort", "sinkhorn_scaling"],
    "fccolit.objectives.ndcg": ["RankingObjective", "NDCGSurrogate", "TopKNDCGSurrogate", "LowerLevel"],
    "fccolit.objectives.pauc": ["RankedRangeBatch", "RankedRangeObjective", "PartialAUCRangeSurrogate",
                                "SumOfRankedRangeLoss"],
    "fccolit.objectives.nonsmooth": ["OuterFunction", "Hinge", "SmoothedHinge", "SquaredHinge", "GapPenalty",
                                     "CompositeObjective"],
    "fccolit.objectives.constrained": ["GroupDROCVaRLoss", "ConstrainedObjective", "ROCFairnessAUCObjective"],
    "fccolit.objectives.continual": ["ContinualLearningObjective", "GlobalContrastiveLoss"],
    "fccolit.surrogates": ["pairwise_surrogate"],
    "fccolit.datamodules.hf": ["HFTable", "HFSplits", "ScaledFeatures", "HFClassificationDataModule",
                               "HFGroupedDataModule", "HFRankingDataModule", "HFRecommendationDataModule"],
    "fccolit.datamodules.base": ["ResumableDataLoader", "DataError", "FCCODataModule"],
    "fccolit.datamodules.synthetic": ["SyntheticBinaryDataModule", "SyntheticMultiLabelDataModule"],
    "fccolit.datamodules.synthetic_multiclass": ["SyntheticMulticlassDataModule"],
    "fccolit.datamodules.synthetic_ranking": ["SyntheticRankingDataModule"],
    "fccolit.datamodules.grouped": ["GroupedDataModule", "SyntheticGroupedDataModule"],
    "fccolit.datamodules.libsvm": ["LibSVMDataModule"],
    "fccolit.datamodules.ranking": ["RankingDataModule", "RecommendationDataModule"],
    "fccolit.datamodules.movielens": ["MovieLensDataModule"],
    "fccolit.datamodules.netflix": ["NetflixDataModule"],
    "fccolit.datamodules.mslr": ["MSLRDataModule"],
    "fccolit.datamodules.cifar": ["CIFARLTDataModule"],
    "fccolit.datamodules.fairness": ["FairnessDataModule"],
    "fccolit.datamodules.chexpert": ["CheXpertDataModule"],
    "fccolit.datamodules.bdd100k": ["BDD100KDataModule"],
    "fccolit.metrics.base": ["BatchMetric", "per_task_names", "EvaluationMetrics"],
    "fccolit.datasets.hf": ["ArrowRowsDataset"],
    "fccolit.datasets.images": ["RowOrigin", "ImageFileDataset", "ImageArrayDataset"],
    "fccolit.datasets.scaling": ["FeatureScaler"],
    "fccolit.datasets.transforms": ["ChestXrayTransform", "ClipImageTransform"],
    "fccolit.datasets.synthetic": ["SyntheticQueryLists"],
    "fccolit.datasets.letor": ["ListwiseTrainDataset", "ListEvalDataset"],
    "fccolit.datasets.recommendation": ["RecommendationTrainDataset", "FullRankingEvalDataset",
                                        "SampledCandidatesEvalDataset"],
    "fccolit.samplers.base": ["SampledBatch", "RankAwareBatchSampler", "SequentialShardSampler"],
    "fccolit.samplers.uniform": ["UniformBatchSampler"],
    "fccolit.samplers.binary": ["DualSampler"],
    "fccolit.samplers.group": ["GroupBatchSampler", "StratifiedBatchSampler"],
    "fccolit.samplers.multilabel": ["MultiLabelSampler", "MultiLabelPairDataset"],
    "fccolit.samplers.ranking": ["QueryBatch", "QueryBatchSampler"],
    "fccolit.models.ltr": ["ListMLP", "ContextAwareRanker"],
    "fccolit.models.mlp": ["SizedModel", "SparseInputLinear", "LinearScorer", "MLP"],
    "fccolit.models.neumf": ["NeuMF"],
    "fccolit.models.vision": ["ResNet20", "TorchvisionBackbone", "CLIPClassifier"],
    "fccolit.io.cache": ["CacheUse", "CorruptCacheEntry"],
    "fccolit.io.fairness": ["Table"],
    "fccolit.io.letor": ["LetorFile"],
    "fccolit.io.libsvm": ["LibSVMFile", "ParsedChunk"],
    "fccolit.io.ratings": ["Ratings"],
    "fccolit.data": ["TensorDictDataset", "SparseRows"],
    "fccolit.algorithms.evaluation": ["Evaluation"],
    "fccolit.algorithms.guards": ["FiniteSteps"],
    "fccolit.algorithms.run_state": ["RunState"],
    "fccolit.callbacks.schedules": ["HyperParameterSchedule", "InverseSqrtSchedule"],
    "fccolit.callbacks.stop_gradient": ["StopGradientSwitch"],
    "fccolit.callbacks.sox_boost": ["SOXBoost"],
    "fccolit.callbacks.warmup": ["WarmUp"],
    "fccolit.callbacks.state_histograms": ["StateHistograms"],
    "fccolit.callbacks.summary": ["MetricsSummary", "ProgressLines", "MetricHistory"],
    "fccolit.callbacks.checkpoint": ["RunCheckpoint"],
    "fccolit.callbacks.prediction_writer": ["PredictionWriter"],
    "fccolit.callbacks.constraints": ["ConstraintStatistics", "ConstraintViolationLogger"],
    "fccolit.callbacks.health": ["TrainingHealthWarning", "HealthReport", "TrainingHealth"],
    "fccolit.checkpoints": ["ConfigurationError", "RunLayout"],
    "fccolit.cli": ["FCCOHelpFormatter", "FCCOArgumentParser", "RunChecks", "SaveAndLogConfig", "FCCOLitCLI"],
    "fccolit.sweep": ["Parameter", "parse_space", "dotted_keys", "check_keys", "changed_keys", "with_values",
                      "check_metric", "selection_value", "FitLauncher", "last_error_line", "Sweep"],
}


@pytest.mark.parametrize("module_name", sorted(DOCTESTED))
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder()
    tests = {test.name.rsplit(".", 1)[-1]: test for test in finder.find(module) if test.examples}
    for name in DOCTESTED[module_name]:
        assert name in tests, f"{module_name}.{name} has no doctest example"
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, report=True)
    assert result.attempted > 0, f"no doctest example ran in {module_name}"
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest examples failed in {module_name}"
