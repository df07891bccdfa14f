from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PayloadCodec(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAYLOAD_CODEC_NONE: _ClassVar[PayloadCodec]
    PAYLOAD_CODEC_ZSTD: _ClassVar[PayloadCodec]
    PAYLOAD_CODEC_LZ4: _ClassVar[PayloadCodec]
    PAYLOAD_CODEC_SNAPPY: _ClassVar[PayloadCodec]
PAYLOAD_CODEC_NONE: PayloadCodec
PAYLOAD_CODEC_ZSTD: PayloadCodec
PAYLOAD_CODEC_LZ4: PayloadCodec
PAYLOAD_CODEC_SNAPPY: PayloadCodec

class Query(_message.Message):
    __slots__ = ("text", "embedding")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    text: str
    embedding: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, text: _Optional[str] = ..., embedding: _Optional[_Iterable[float]] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("id", "features")
    ID_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    id: str
    features: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, id: _Optional[str] = ..., features: _Optional[_Iterable[float]] = ...) -> None: ...

class EntityList(_message.Message):
    __slots__ = ("entities",)
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    entities: _containers.RepeatedCompositeFieldContainer[Entity]
    def __init__(self, entities: _Optional[_Iterable[_Union[Entity, _Mapping]]] = ...) -> None: ...

class PackedFeatures(_message.Message):
    __slots__ = ("entity_ids", "feature_count", "payload_codec", "data")
    ENTITY_IDS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_CODEC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    entity_ids: _containers.RepeatedScalarFieldContainer[str]
    feature_count: int
    payload_codec: PayloadCodec
    data: bytes
    def __init__(self, entity_ids: _Optional[_Iterable[str]] = ..., feature_count: _Optional[int] = ..., payload_codec: _Optional[_Union[PayloadCodec, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("data", "format")
    DATA_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    format: str
    def __init__(self, data: _Optional[bytes] = ..., format: _Optional[str] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("request_id", "query", "entities", "packed", "image", "chunk_entities")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    ENTITIES_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_ENTITIES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    query: Query
    entities: EntityList
    packed: PackedFeatures
    image: Image
    chunk_entities: int
    def __init__(self, request_id: _Optional[str] = ..., query: _Optional[_Union[Query, _Mapping]] = ..., entities: _Optional[_Union[EntityList, _Mapping]] = ..., packed: _Optional[_Union[PackedFeatures, _Mapping]] = ..., image: _Optional[_Union[Image, _Mapping]] = ..., chunk_entities: _Optional[int] = ...) -> None: ...

class ScoreList(_message.Message):
    __slots__ = ("scores",)
    SCORES_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, scores: _Optional[_Iterable[float]] = ...) -> None: ...

class PackedScores(_message.Message):
    __slots__ = ("count", "payload_codec", "data")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_CODEC_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    count: int
    payload_codec: PayloadCodec
    data: bytes
    def __init__(self, count: _Optional[int] = ..., payload_codec: _Optional[_Union[PayloadCodec, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class PredictResponse(_message.Message):
    __slots__ = ("request_id", "score_list", "packed_scores", "entity_offset", "model_version", "server_instance_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SCORE_LIST_FIELD_NUMBER: _ClassVar[int]
    PACKED_SCORES_FIELD_NUMBER: _ClassVar[int]
    ENTITY_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    score_list: ScoreList
    packed_scores: PackedScores
    entity_offset: int
    model_version: str
    server_instance_id: str
    def __init__(self, request_id: _Optional[str] = ..., score_list: _Optional[_Union[ScoreList, _Mapping]] = ..., packed_scores: _Optional[_Union[PackedScores, _Mapping]] = ..., entity_offset: _Optional[int] = ..., model_version: _Optional[str] = ..., server_instance_id: _Optional[str] = ...) -> None: ...

class BatchPredictRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[PredictRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[PredictRequest, _Mapping]]] = ...) -> None: ...

class BatchPredictResponse(_message.Message):
    __slots__ = ("responses", "model_version", "server_instance_id")
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[PredictResponse]
    model_version: str
    server_instance_id: str
    def __init__(self, responses: _Optional[_Iterable[_Union[PredictResponse, _Mapping]]] = ..., model_version: _Optional[str] = ..., server_instance_id: _Optional[str] = ...) -> None: ...
